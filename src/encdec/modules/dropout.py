"""Dropout with cheap masks.

torch's CPU dropout draws one Bernoulli sample per element, which costs about a
quarter of a small T5 training step. Here one 64-bit random integer from torch's
generator yields four 16-bit uniforms, each compared with round(p * 65536): the
drop probability is p to within 1/65536 (0.100006 for p = 0.1), the mask is a
float tensor (multiplying by it is the fastest masking here), and seeding torch
seeds it. On GPUs torch's own fused dropout is used.
"""

import torch
import torch.nn.functional as F
from torch import nn


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.is_cuda or p >= 1.0:
        return F.dropout(x, p, training=True)
    threshold = round(p * 65536) - 32768  # keep where a uniform int16 is at least this
    words = (x.numel() + 3) // 4
    bits = torch.empty(words, dtype=torch.int64, device=x.device).random_(-(2**63), None)  # 64 random bits
    keep = bits.view(torch.int16)[: x.numel()] >= threshold
    mask = keep.to(x.dtype).mul_(1.0 / (1.0 - p)).view(x.shape)  # a float mask multiplies fastest on CPU
    return x * mask


class Dropout(nn.Module):
    """Drop-in for nn.Dropout using `dropout` above."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
