"""Normalisation layers: LayerNorm with or without bias, T5's RMSNorm and Gemma's."""

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """T5's LayerNorm: scale by the root mean square, no mean subtraction, no bias.

    The variance is computed in fp32 (as T5 does) so bf16 activations stay stable.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:  # one fused op, bit-identical in fp32
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        variance = x.float().pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(self.weight.dtype)


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: x / rms(x) * (1 + weight), all in float32 and then cast to x's dtype (T5's casts x
    back before its product). The weight starts at zero, a gain of one."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


def build_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """`kind` is "rmsnorm" (T5), "gemma_rmsnorm" (Gemma) or "layernorm" (Vaswani, GPT; `bias` optional)."""
    if kind == "rmsnorm":
        return RMSNorm(d_model, eps)
    if kind == "gemma_rmsnorm":
        return GemmaRMSNorm(d_model, eps)
    return nn.LayerNorm(d_model, eps=eps, bias=bias)
