"""What this CPU multiplies natively, read once: AMX's tiles (bf16 and int8 matrix products, about 6x fp32's
rate on a Sapphire Rapids core), AVX-512 BF16 (bf16 dot products in vector registers) and VNNI (int8 dot
products); and its model name, written beside every CPU figure.

torch's own probes answer what the CPU and the operating system allow (AMX needs the kernel's leave to use
its tiles, which torch asks for). oneDNN, which runs torch's CPU products, can be limited to an older
instruction set (ONEDNN_MAX_CPU_ISA, to stand for a CPU without AMX on one that has it): a limit below a set
counts as the CPU lacking it here too, so `precision: auto` follows what the products will use.

    precision "auto" on a CPU    bf16 autocast where the CPU multiplies bf16 natively, by AMX's tiles or
    (training.numerics) and      AVX-512 BF16's dot products; fp32 elsewhere. On a Xeon with AMX, t5-small
    --dtype auto on a decoding   decodes 1.35-1.7x fp32's tokens/s in bf16; on an AMD EPYC with AVX-512 BF16
    command (runs.model_dtype)   and no AMX 1.2-1.8x, and trains 2.2-2.5x fp32's tokens/s under bf16 autocast
                                 (docs/benchmarks.md, "The CPU's own bf16")
"""

import functools
import os
import platform
from dataclasses import dataclass

import torch

BF16_FREE_LIMITS = ("AVX512_CORE_VNNI", "AVX512_CORE", "AVX2_VNNI_2", "AVX2_VNNI", "AVX2", "SSE41")  # no bf16 dots
AMX_FREE_LIMITS = ("AVX512_CORE_BF16", *BF16_FREE_LIMITS)


@dataclass(frozen=True)
class CpuFeatures:
    model: str
    amx: bool  # AMX tiles (bf16 and int8 matrix products)
    avx512_bf16: bool  # bf16 dot products in AVX-512 registers
    vnni: bool  # int8 dot products (AVX-512 VNNI or AVX-VNNI)

    @property
    def native_bf16(self) -> bool:
        """Whether this CPU multiplies bf16 natively (AMX or AVX-512 BF16): what `precision: auto` and the decoding
        commands' `--dtype auto` pick bf16 on."""
        return self.amx or self.avx512_bf16

    def describe(self) -> str:
        """One line for a table: the model, then what it has and lacks ("AMD EPYC; AVX-512 BF16, VNNI; no AMX")."""
        named = {"AMX": self.amx, "AVX-512 BF16": self.avx512_bf16, "VNNI": self.vnni}
        has = [name for name, present in named.items() if present]
        lacks = [name for name, present in named.items() if not present]
        return "; ".join(
            [self.model, *([", ".join(has)] if has else []), *([f"no {', '.join(lacks)}"] if lacks else [])]
        )


@functools.cache
def cpu_features() -> CpuFeatures:
    """This machine's CpuFeatures, read on the first call."""
    probe, limit = torch.cpu, os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    amx = _probed(probe, "_is_amx_tile_supported") and _allowed(limit, AMX_FREE_LIMITS)
    bf16 = _probed(probe, "_is_avx512_bf16_supported") and _allowed(limit, BF16_FREE_LIMITS)
    return CpuFeatures(_model_name(), amx, bf16, _probed(probe, "_is_vnni_supported"))


ISA_LIMITS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "CT2_FORCE_CPU_ISA")  # oneDNN's, MKL's, CTranslate2's


def isa_limits() -> str:
    """The instruction-set limits this process runs under, for a table's heading ("ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16,
    ..."), or "no instruction-set limit": set to stand for a CPU without AMX on one that has it."""
    named = [f"{name}={os.environ[name]}" for name in ISA_LIMITS if os.environ.get(name)]
    return ", ".join(named) if named else "no instruction-set limit"


def _probed(module, name: str) -> bool:
    """torch.cpu's probe `name`, False where this torch has none."""
    probe = getattr(module, name, None)
    return bool(probe()) if probe is not None else False


def _allowed(limit: str, lacking: tuple[str, ...]) -> bool:
    """Whether oneDNN may use a set under ONEDNN_MAX_CPU_ISA=`limit` (unset, ALL or DEFAULT: no limit), `lacking`
    the limits below it."""
    return limit.strip().upper() not in lacking


def _model_name() -> str:
    """/proc/cpuinfo's model name on Linux, else the platform's processor, else "unknown CPU"."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
