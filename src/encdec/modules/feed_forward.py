"""Position-wise feed-forward blocks: plain (ReLU, GELU) and gated (T5 v1.1 gated GELU, SwiGLU).

Weight names follow T5 (`wi`, `wo`; `wi_0`, `wi_1` when gated) so checkpoints map one to one.
"""

import torch
import torch.nn.functional as F
from torch import nn

from encdec.modules.decoding_linear import decoding_linear
from encdec.modules.dropout import Dropout

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,  # Marian's "swish"
    "gated_gelu": lambda x: F.gelu(x, approximate="tanh"),  # T5 v1.1 / Flan-T5 use the tanh form
    "swiglu": F.silu,
}
GATED = {"gated_gelu", "swiglu"}


class FeedForward(nn.Module):
    """C -> d_ff -> C. Gated variants compute act(wi_0 x) * (wi_1 x) (Shazeer 2020)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = False, dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.gated = activation in GATED
        if self.gated:
            self.wi_0 = nn.Linear(d_model, d_ff, bias=bias)
            self.wi_1 = nn.Linear(d_model, d_ff, bias=bias)
        else:
            self.wi = nn.Linear(d_model, d_ff, bias=bias)
        self.wo = nn.Linear(d_ff, d_model, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            h = self.act(linear(x, self.wi_0)) * linear(x, self.wi_1)
        elif self.act is F.relu:  # fused into the product where oneDNN takes it
            h = linear(x, self.wi, relu=True)
        else:
            h = self.act(linear(x, self.wi))
        return linear(self.dropout(h), self.wo)


def linear(x: torch.Tensor, layer: nn.Linear, relu: bool = False) -> torch.Tensor:
    return decoding_linear(x, layer.weight, layer.bias, relu)  # F.linear, or a faster kernel on CPU inference
