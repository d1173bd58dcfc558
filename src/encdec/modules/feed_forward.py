"""Position-wise feed-forward blocks: plain (ReLU, GELU) and gated (T5 v1.1 gated GELU, SwiGLU).

Weight names follow T5 (`wi`, `wo`; `wi_0`, `wi_1` when gated) so checkpoints map one to one.
Under fp16 autocast `wo` runs in fp32, where T5's outputs would overflow fp16 (modules/fp16.py).
"""

import torch
import torch.nn.functional as F
from torch import nn

from encdec.modules.decoding_linear import ACTIVATIONS as PRODUCT_ACTIVATIONS
from encdec.modules.decoding_linear import activated, decoding_linear
from encdec.modules.dropout import Dropout
from encdec.modules.fp16 import fp16_autocast
from encdec.modules.int8_linear import Int8Linear

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
        self.fused = activation if activation in PRODUCT_ACTIVATIONS else None  # inside the product (oneDNN)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            h = self.act(linear(x, self.wi_0)) * linear(x, self.wi_1)
        elif self.fused is not None:
            h = linear(x, self.wi, self.fused)
        else:
            h = self.act(linear(x, self.wi))
        h = self.dropout(h)
        if fp16_autocast(h):  # T5's known fp16 overflow: the output projection in fp32, as Hugging Face keeps it
            if isinstance(self.wo, Int8Linear):
                return self.wo(h.float())  # int8 inside, fp32 out
            with torch.autocast(h.device.type, enabled=False):
                if type(self.wo) is not nn.Linear:  # an adapted layer (LoRA) computes its own product
                    return self.wo(h.float())
                bias = self.wo.bias.float() if self.wo.bias is not None else None
                return F.linear(h.float(), self.wo.weight.float(), bias)
        return linear(h, self.wo)


def linear(x: torch.Tensor, layer: nn.Module, activation: str = "none") -> torch.Tensor:
    """layer(x) (then `activation`: decoding_linear's names), through `decoding_linear` when `layer` is a plain
    nn.Linear; a quantized (Int8Linear) or adapted (peft's LoRA) layer is called as it is."""
    if type(layer) is not nn.Linear:
        return activated(layer(x), activation)
    return decoding_linear(x, layer.weight, layer.bias, activation)  # F.linear, or a faster kernel on CPU
