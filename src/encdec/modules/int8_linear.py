"""A linear layer with int8 weights and dynamically quantized int8 activations, for CPU decoding.

The weight is quantized once, symmetrically per output row (scale = max |w_row| / 127),
and prepacked for fbgemm; at each call torch's `quantized::linear_dynamic` quantizes
the activations per tensor from their own range, multiplies in int8 with int32
accumulation and returns fp32 (the dynamic scheme of Jacob et al. 2018, as
`torch.ao.quantization.quantize_dynamic` applies it). Activations use 7 bits
(`reduce_range`), as torch's default for fbgemm, so that no int16 sum saturates on
CPUs without VNNI. The layer is a module of its own rather than a module swap of
`quantize_dynamic` because encdec's feed-forward and vocabulary products call
`decoding_linear(x, layer.weight)` functionally; they check for this class.
torch 2.13 warns that creating quantized tensors is deprecated (the packing here
silences it); should a later torch drop them, torchao's int8 dynamic quantization is
the replacement. On this repository's 2-core AVX-512 CPU, one decoding product of 8-32
rows ran 2-6x faster than `decoding_linear`'s fp32 oneDNN path; torch's weight-only
`_weight_int8pack_mm` was 20x slower than fp32 there, and oneDNN's int8 engine no faster overall.

Shapes: N rows (batch times positions), C_in, C_out.
"""

import warnings

import torch
from torch import nn

ENGINE = "fbgemm"  # x86's int8 GEMMs; the engine is fixed when the weight is packed


def int8_supported() -> bool:
    """Whether this torch build has the CPU int8 kernels Int8Linear packs for."""
    return ENGINE in torch.backends.quantized.supported_engines and hasattr(torch.ops.quantized, "linear_dynamic")


class Int8Linear(nn.Module):
    """x (..., C_in) -> (..., C_out) in fp32, with the weight held as per-row int8 (CPU only)."""

    reduce_range = True

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        weight = weight.detach().float()
        scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12).double()  # (C_out,)
        zero_points = torch.zeros(self.out_features, dtype=torch.long)
        previous = torch.backends.quantized.engine
        try:
            torch.backends.quantized.engine = ENGINE
            with warnings.catch_warnings():  # torch 2.13 marks quantized tensors deprecated; the kernels remain
                warnings.simplefilter("ignore", UserWarning)
                qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)  # (C_out, C_in)
                bias = None if bias is None else bias.detach().float()
                self.packed = torch.ops.quantized.linear_prepack(qweight, bias)
        finally:
            torch.backends.quantized.engine = previous

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # (N, C_in)
        if flat.dtype != torch.float32:
            flat = flat.float()
        out = torch.ops.quantized.linear_dynamic(flat, self.packed, self.reduce_range)  # (N, C_out)
        return out.reshape(*x.shape[:-1], self.out_features)

    def int8_weight(self) -> torch.Tensor:
        """The stored weight as torch's qint8 tensor (C_out, C_in), per-row scales attached."""
        return torch.ops.quantized.linear_unpack(self.packed)[0]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"
