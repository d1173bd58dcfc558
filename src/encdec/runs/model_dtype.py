"""The dtype a model is opened in: the one its weights were stored in unless another is asked, as
transformers' `dtype="auto"` (its default since 5.0) keeps a bf16 checkpoint in bf16.

    encdec.from_pretrained("checkpoints/t5gemma-bf16")                   # bfloat16, as stored
    encdec.from_pretrained("checkpoints/t5gemma-bf16", dtype="float32")  # cast after loading
    encdec generate DIR --dtype bf16 ...                                 # the same choice on every command

The stored dtype of a Hugging Face directory is config.json's `dtype` (`torch_dtype` before transformers
5), else the first floating weight's in its safetensors file; of an encdec checkpoint, its
model.safetensors' (training writes float32). A pytorch_model.bin that config.json says nothing about is
taken as float32 rather than unpickled twice.
"""

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from encdec.cpu_features import cpu_features
from encdec.errors import CheckpointError, ConfigError
from encdec.schema import load_json, short

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
CHOICES = ("auto", *DTYPES, *ALIASES)  # what --dtype and from_pretrained(dtype=) take
SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def dtype_named(spec: str | torch.dtype | None) -> torch.dtype | None:
    """torch's dtype for `spec` ("float32", "bf16", torch.float16, ...); None for "auto" or None (as stored);
    anything else is one sentence."""
    if spec is None or spec == "auto":
        return None
    if isinstance(spec, torch.dtype) and spec in DTYPES.values():
        return spec
    if isinstance(spec, str) and ALIASES.get(spec, spec) in DTYPES:
        return DTYPES[ALIASES.get(spec, spec)]
    raise ConfigError(f"dtype must be one of {', '.join(CHOICES)} or a torch floating dtype, got {short(spec, 40)}")


def stored_dtype(path: Path, weights: Path | None = None) -> torch.dtype:
    """The dtype the model at `path` was saved in: config.json's dtype where it names one, else the first
    floating tensor's of `weights` (or of path's model.safetensors / first shard), else float32."""
    config = path / "config.json"
    if config.is_file():
        values = load_json(config, "Hugging Face file", CheckpointError)
        named = values.get("dtype", values.get("torch_dtype")) if isinstance(values, dict) else None
        if isinstance(named, str) and named in DTYPES:
            return DTYPES[named]
    file = weights or first_safetensors(path)
    return first_floating_dtype(file) if file is not None else torch.float32


def first_safetensors(path: Path) -> Path | None:
    """path's model.safetensors, or the first shard file its safetensors index lists in the directory."""
    if (path / "model.safetensors").is_file():
        return path / "model.safetensors"
    shards = sorted(path.glob("model-*-of-*.safetensors"))
    return shards[0] if shards else None


def first_floating_dtype(file: Path) -> torch.dtype:
    """The dtype of the first floating tensor stored in `file` (read from its header, no tensor loaded)."""
    try:
        with safe_open(str(file), framework="pt") as weights:
            for name in weights.keys():
                kind = weights.get_slice(name).get_dtype()
                if kind in SAFETENSORS_DTYPES:
                    return SAFETENSORS_DTYPES[kind]
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{file} is not a readable safetensors file ({str(error)[:100]})") from None
    return torch.float32


def native_dtype(dtype: str, device: torch.device, quantize: str | None) -> torch.dtype | None:
    """What a decoding command (generate, serve, transcribe) prefers for a float32 model under `--dtype auto`:
    bf16 on a CPU that multiplies it natively, by AMX or AVX-512 BF16 (encdec.cpu_features, as `precision: auto`
    trains), unless `quantize` asks for int8 (which quantizes float32 weights) or another dtype is named; None
    (as stored) elsewhere. The figures on a Xeon with AMX and an AMD EPYC without it are in docs/benchmarks.md
    ("Decoding beside CTranslate2's best", "The CPU's own bf16")."""
    if dtype != "auto" or quantize is not None or device.type != "cpu" or not cpu_features().native_bf16:
        return None
    return torch.bfloat16


def cast_to(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`model` with its floating parameters and buffers in `dtype` (integer buffers and int8 layers kept)."""
    if any(p.is_floating_point() and p.dtype != dtype for p in model.parameters()):
        model.to(dtype)
    return model
