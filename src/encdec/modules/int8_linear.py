"""A linear layer with int8 weights and dynamically quantized int8 activations, for decoding on the CPU or a GPU.

The weight is quantized once, symmetrically per output row (scale = max |w_row| / 127);
at each call the activations are quantized from their own range, multiplied in int8
with int32 accumulation and rescaled to floating point (the dynamic scheme of Jacob
et al. 2018, as `torch.ao.quantization.quantize_dynamic` applies it). Two kernels,
chosen by the weight's device when the layer is built (or named by `kernel=`):

- "fbgemm" (CPU, fp32): the weight is prepacked for fbgemm and torch's
  `quantized::linear_dynamic` quantizes the activations per tensor, with 7 bits
  (`reduce_range`, torch's default for fbgemm) so that no int16 sum saturates on CPUs
  without VNNI, and returns fp32. torch 2.13 warns that creating quantized tensors is
  deprecated (the packing here silences it); should a later torch drop them, torchao's
  int8 dynamic quantization is the replacement. On this repository's 2-core AVX-512 CPU,
  one decoding product of 8-32 rows ran 2-6x faster than `decoding_linear`'s fp32 oneDNN
  path; torch's weight-only `_weight_int8pack_mm` was 20x slower than fp32 there, and
  oneDNN's int8 engine no faster overall.
- "int_mm" (CUDA, fp32/bf16/fp16 models; also runs on the CPU, which is how it is
  tested): the weight is a plain contiguous (C_out, C_in) int8 buffer with fp32 scales;
  the activations are quantized per row, with all 8 bits ([-127, 127]), and
  `torch._int_mm` (cuBLASLt's int8 GEMM on a GPU) gives the exact int32 products, which
  are rescaled by x_scale[:, None] * w_scale[None, :], biased, and cast back to the
  input's dtype. Per-row activation scales cost nothing in that rescale, and they keep
  each row's precision its own: a row with a large range (or another example in the
  batch) does not coarsen the others, so a batch gives exactly what its rows give one
  at a time. CUDA's `_int_mm` needs more than 16 rows and C_in, C_out multiples of 8:
  fewer rows are padded with zeros to 32 (and the result sliced), and the constructor
  refuses other feature counts (encdec.quantize leaves such layers in floating point).

The layer is a module of its own rather than a module swap of `quantize_dynamic`
because encdec's feed-forward and vocabulary products call `decoding_linear(x, layer.weight)`
functionally; they check for this class.

Shapes: N rows (batch times positions), C_in, C_out.
"""

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from encdec.errors import ConfigError

ENGINE = "fbgemm"  # x86's int8 GEMMs; the engine is fixed when the weight is packed
KERNELS = ("fbgemm", "int_mm")
INT_MM_MIN_ROWS = 17  # CUDA's _int_mm needs more than 16 rows
INT_MM_PADDED_ROWS = 32  # what fewer rows are padded to
INT_MM_MULTIPLE = 8  # CUDA's _int_mm needs C_in and C_out multiples of this


def int8_supported(kernel: str = "fbgemm") -> bool:
    """Whether this torch build has the int8 kernels `kernel` needs."""
    if kernel == "int_mm":
        return hasattr(torch, "_int_mm")
    return ENGINE in torch.backends.quantized.supported_engines and hasattr(torch.ops.quantized, "linear_dynamic")


def default_kernel(weight: torch.Tensor) -> str:
    """The kernel for a weight where it lies: int_mm on a GPU, fbgemm on the CPU."""
    return "int_mm" if weight.device.type == "cuda" else "fbgemm"


def int_mm_fits(weight: torch.Tensor) -> bool:
    """Whether CUDA's _int_mm takes a (C_out, C_in) weight: both multiples of 8."""
    return weight.shape[0] % INT_MM_MULTIPLE == 0 and weight.shape[1] % INT_MM_MULTIPLE == 0


def row_scales(x: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 scales of a 2-D tensor's rows: max |row| / 127, kept away from 0. (R, C) -> (R,)"""
    return (x.abs().amax(dim=1) / 127).clamp(min=1e-12)


def quantize_rows(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x (R, C) in floating point -> int8 (R, C), each row divided by its scale, rounded and clamped."""
    return (x / scales[:, None]).round().clamp(-127, 127).to(torch.int8)


class Int8Linear(nn.Module):
    """x (..., C_in) -> (..., C_out) with the weight held as per-row int8: fp32 out on the fbgemm
    kernel, the input's dtype on the int_mm kernel."""

    reduce_range = True  # fbgemm's 7-bit activations

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, kernel: str | None = None):
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.kernel = kernel or default_kernel(weight)
        if self.kernel not in KERNELS:
            raise ConfigError(f"Int8Linear's kernel must be one of {', '.join(KERNELS)}, got {self.kernel!r}")
        weight = weight.detach().float()
        bias = None if bias is None else bias.detach().float()
        if self.kernel == "int_mm":
            self.init_int_mm(weight, bias)
        else:
            self.init_fbgemm(weight.cpu(), None if bias is None else bias.cpu())

    def init_fbgemm(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        scales = row_scales(weight).double()  # (C_out,)
        zero_points = torch.zeros(self.out_features, dtype=torch.long)
        previous = torch.backends.quantized.engine
        try:
            torch.backends.quantized.engine = ENGINE
            with warnings.catch_warnings():  # torch 2.13 marks quantized tensors deprecated; the kernels remain
                warnings.simplefilter("ignore", UserWarning)
                qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)  # (C_out, C_in)
                self.packed = torch.ops.quantized.linear_prepack(qweight, bias)
        finally:
            torch.backends.quantized.engine = previous

    def init_int_mm(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        if not int_mm_fits(weight):
            raise ConfigError(
                f"the int_mm kernel needs in and out features that are multiples of {INT_MM_MULTIPLE}, "
                f"got {self.in_features} and {self.out_features}"
            )
        scales = row_scales(weight)  # (C_out,) fp32
        # buffers follow model.to(); not persistent: int8 layers are rebuilt from a float checkpoint, never saved
        self.register_buffer("weight_int8", quantize_rows(weight, scales).contiguous(), persistent=False)
        self.register_buffer("weight_scale", scales, persistent=False)  # (C_out,)
        self.register_buffer("bias", bias, persistent=False)  # (C_out,) fp32 or None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # (N, C_in)
        if self.kernel == "int_mm":
            out = self.int_mm(flat)
        else:
            out = torch.ops.quantized.linear_dynamic(flat.float(), self.packed, self.reduce_range)  # (N, C_out) fp32
        return out.reshape(*x.shape[:-1], self.out_features)

    def int_mm(self, flat: torch.Tensor) -> torch.Tensor:
        """flat (N, C_in) -> (N, C_out) in flat's dtype: per-row int8 activations, exact int32 products."""
        n = flat.shape[0]
        x = flat.float()
        x_scale = row_scales(x)  # (N,)
        x_int8 = quantize_rows(x, x_scale)  # (N, C_in)
        if n < INT_MM_MIN_ROWS:
            x_int8 = F.pad(x_int8, (0, 0, 0, INT_MM_PADDED_ROWS - n))  # (32, C_in), zero rows
        acc = torch._int_mm(x_int8, self.weight_int8.t())[:n]  # (N, C_out) int32; w.t(): column-major, for cuBLASLt
        out = acc.float() * x_scale[:, None] * self.weight_scale[None, :]
        if self.bias is not None:
            out = out + self.bias
        return out.to(flat.dtype)

    def int8_weight(self) -> torch.Tensor:
        """The stored weight as torch's qint8 tensor (C_out, C_in) on the CPU, per-row scales attached."""
        if self.kernel == "fbgemm":
            return torch.ops.quantized.linear_unpack(self.packed)[0]
        zero_points = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch._make_per_channel_quantized_tensor(
                self.weight_int8.cpu(), self.weight_scale.double().cpu(), zero_points, 0
            )

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights, kernel={self.kernel}"
