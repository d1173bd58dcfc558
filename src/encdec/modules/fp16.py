"""Keeping fp16 finite where T5 overflows it.

T5's feed-forward outputs grow past fp16's largest value (65,504) in trained checkpoints,
v1.1 and Flan-T5 above all (Hugging Face transformers issue 10956). Hugging Face keeps the
output projection `wo` in fp32 when a T5 is loaded in fp16 (`_keep_in_fp32_modules`) and
clamps the residual stream of a half-precision model after each sublayer; encdec does the
same, so that fp16 training (training.precision: fp16, for GPUs without bf16) and fp16
inference stay finite. Neither touches fp32 or bf16: they are no-ops there.
"""

import torch


def fp16_autocast(x: torch.Tensor) -> bool:
    """True inside an fp16 autocast region on x's device."""
    device = x.device.type
    return torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.float16


def clamp_fp16(x: torch.Tensor) -> torch.Tensor:
    """x itself unless it is fp16; then clamped to +-(max - 1000) where it overflowed, as Hugging Face's
    T5Block does (decided on the device: no host sync)."""
    if x.dtype != torch.float16:
        return x
    top = torch.finfo(torch.float16).max
    limit = torch.where(torch.isinf(x).any(), top - 1000, top)
    return torch.clamp(x, -limit, limit)
