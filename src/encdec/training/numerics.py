"""How a run computes on its device: precision, TF32, determinism, and the RNG states a checkpoint keeps.

    precision "auto"   bf16 autocast on a GPU that supports it and on a CPU that multiplies bf16 natively
                       (AMX or AVX-512 BF16: encdec.cpu_features), fp32 elsewhere
    precision "fp16"   fp16 autocast with dynamic loss scaling (GradScaler), for GPUs without
                       bf16 (V100, T4); refused on a CPU and with FSDP
    fp32 on CUDA       TF32 matmuls and convolutions (10-bit mantissa inputs, fp32 accumulation)
    deterministic      torch.use_deterministic_algorithms: SDPA's fused backward, scatter-adds
                       and cuBLAS take their deterministic paths, so a GPU run repeats bitwise

Every setting is process-wide in torch; `numerics()` sets them for one run and
puts the previous ones back, so a library call leaves no trace.
"""

import os
from contextlib import contextmanager, nullcontext

import torch

from encdec.cpu_features import cpu_features
from encdec.errors import ConfigError

CUBLAS_DETERMINISTIC = ":4096:8"  # cuBLAS needs a fixed workspace to repeat its reductions


def resolve_precision(precision: str, device: torch.device, distributed: str | None = None) -> str:
    """fp32, bf16 or fp16: "auto" picks bf16 on a GPU with bf16 support and on a CPU with native bf16, else fp32."""
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
        return "bf16" if device.type == "cpu" and cpu_features().native_bf16 else "fp32"
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("training.precision is bf16 but this GPU does not support bfloat16; use fp16 or fp32")
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError(
            f"training.precision fp16 needs a CUDA GPU (loss scaling, fp16 kernels); on {device.type} use fp32"
        )
    if precision == "fp16" and distributed == "fsdp":
        raise ConfigError("training.precision fp16 is not supported with FSDP; use bf16, or ddp")
    return precision


def autocast(precision: str, device: torch.device):
    """bf16 or fp16 autocast for the forward pass, or nothing; weights and optimizer state stay fp32."""
    if precision in ("bf16", "fp16"):
        return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    return nullcontext()


def grad_scaler(precision: str, device: torch.device) -> "torch.amp.GradScaler | None":
    """fp16's dynamic loss scale (None otherwise): gradients are computed scaled so that small ones do not
    flush to zero, unscaled before clipping, and a step whose gradients overflow is skipped."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


@contextmanager
def numerics(device: torch.device, deterministic: bool):
    """TF32 on CUDA; deterministic algorithms if asked; the previous settings restored afterwards."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)  # read when cuBLAS starts
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            algorithms,
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        ) = saved
        torch.use_deterministic_algorithms(algorithms)


def rng_states(device: torch.device) -> dict[str, torch.Tensor]:
    """This process's torch RNG states: the CPU generator's and, on a GPU, its device's."""
    states = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(states: dict[str, torch.Tensor], device: torch.device) -> bool:
    """Restore `rng_states`; False when the checkpoint has no state for this device (a CPU run resumed on a GPU)."""
    torch.set_rng_state(states["cpu"])
    if device.type != "cuda":
        return True
    if "cuda" not in states:
        return False
    torch.cuda.set_rng_state(states["cuda"], device)
    return True


def checkpoint_activations(model: torch.nn.Module) -> int:
    """Wrap every transformer block so that backward recomputes its activations instead of keeping them
    (torch's non-reentrant checkpointing; dropout masks are recomputed from the saved RNG state, so the
    gradients are those of the unwrapped model). Parameter names are unchanged. Returns the blocks wrapped."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

    from encdec.modules import DecoderBlock, EncoderBlock

    blocks = sum(isinstance(m, (EncoderBlock, DecoderBlock)) for m in model.modules())
    if not blocks:
        raise ConfigError(
            f"training.activation_checkpointing: the {type(model).__name__} model has no transformer "
            "blocks to checkpoint"
        )
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, (EncoderBlock, DecoderBlock)))
    return blocks
