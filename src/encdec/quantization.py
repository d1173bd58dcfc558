"""int8 decoding: `encdec.quantize(model, "int8")` turns a float model's linear layers into int8 ones.

Every nn.Linear (attention projections, feed-forward, the separate or tied vocabulary
projection) becomes an `Int8Linear`: int8 weights per output row, int8 activations
quantized per call. Embeddings, norms, position biases, recurrent cells and MoE
routers stay in floating point (a router's argmax decides which expert runs, and its
product is tiny). The kernel follows the model's device: on the CPU, fbgemm's, which
needs fp32 weights and returns fp32; on a CUDA GPU, `torch._int_mm`, for fp32, bf16 or
fp16 models, returning the model's dtype. On a GPU a layer whose in or out features are
not multiples of 8 stays in floating point (CUDA's int8 GEMM needs them), and the log
line says how many did. The model comes back in eval mode, for inference only: int8
layers have no gradient and are not saved in checkpoints (quantize after loading).

    model = encdec.quantize(encdec.from_pretrained("runs/multi30k"), "int8")
    model = encdec.from_pretrained("runs/multi30k", device="cuda", quantize="int8")   # int8 on the GPU
"""

import logging

import torch
from torch import nn

from encdec.errors import ConfigError
from encdec.modules.int8_linear import KERNELS, Int8Linear, default_kernel, int8_supported, int_mm_fits

log = logging.getLogger(__name__)
SCHEMES = ("int8",)
KEEP_FLOAT = ("router",)  # attribute names whose Linear stays in floating point
GPU_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def quantize(model: nn.Module, scheme: str = "int8") -> nn.Module:
    """`model` with its linear layers in `scheme` (only "int8"), in eval mode; changed in place."""
    if scheme not in SCHEMES:
        raise ConfigError(f"quantize must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    return quantize_int8(model)


def quantize_int8(model: nn.Module, kernel: str | None = None) -> nn.Module:
    """Swap every nn.Linear of `model` for an Int8Linear (and untie a tied vocabulary projection into an
    int8 copy of the embeddings); returns the model in eval mode. `kernel` (fbgemm or int_mm) overrides
    the one the model's device picks: int_mm on the CPU runs the GPU path's arithmetic, for tests."""
    kernel = check_int8(model, kernel)
    swapped, kept = swap_linears(model, kernel)
    embed = getattr(model, "embed", None)
    if hasattr(model, "lm_head") and model.lm_head is None and isinstance(embed, nn.Embedding):
        if kernel == "int_mm" and not int_mm_fits(embed.weight):
            kept += 1  # the tied head stays the embeddings' own product
        else:  # the tied head, int8; the embedding lookup stays in floating point
            model.lm_head = Int8Linear(embed.weight, kernel=kernel)
            swapped += 1
    model.requires_grad_(False)
    log.info("int8 (%s kernel): %d linear layers quantized, %d left in floating point", kernel, swapped, kept)
    return model.eval()


def check_int8(model: nn.Module, kernel: str | None = None) -> str:
    """The kernel for `model` (`kernel` if given, else its device's); refuses, in one sentence, a model
    the int8 kernels cannot run."""
    params = list(model.parameters())
    devices = {p.device.type for p in params}
    if not devices <= {"cpu"} and devices != {"cuda"}:
        where = ", ".join(sorted(devices))
        raise ConfigError(
            f"int8 decoding runs on the CPU or a CUDA GPU, and the model is on {where}: "
            f"move it with model.to('cpu') or model.to('cuda') first"
        )
    kernel = kernel or default_kernel(params[0] if params else torch.empty(0))
    if kernel not in KERNELS:
        raise ConfigError(f"the int8 kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if kernel == "fbgemm" and "cuda" in devices:
        raise ConfigError("the fbgemm int8 kernel runs on the CPU only; use the int_mm kernel for a model on a GPU")
    if not int8_supported(kernel):
        what = "fbgemm int8 kernels" if kernel == "fbgemm" else "int8 matrix product (torch._int_mm)"
        raise ConfigError(f"int8 decoding needs torch's {what}, which this torch build lacks")
    if any(isinstance(m, Int8Linear) for m in model.modules()):
        raise ConfigError("this model is already quantized to int8")
    dtypes = {p.dtype for p in params if p.is_floating_point()}
    allowed = (torch.float32,) if kernel == "fbgemm" else GPU_DTYPES
    if set(dtypes) - set(allowed):
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
        if kernel == "fbgemm":
            raise ConfigError(
                f"int8 decoding on the CPU quantizes fp32 weights, and this model holds {names}: load it in fp32"
            )
        raise ConfigError(f"the int_mm kernel quantizes fp32, bf16 or fp16 weights, and this model holds {names}")
    return kernel


def swap_linears(module: nn.Module, kernel: str) -> tuple[int, int]:
    """Replace the nn.Linear children of `module`, recursively, by Int8Linear; returns how many were
    swapped and how many the int_mm kernel cannot take (features not multiples of 8) stayed float."""
    swapped = kept = 0
    for name, child in module.named_children():
        if type(child) is nn.Linear and name not in KEEP_FLOAT:
            if kernel == "int_mm" and not int_mm_fits(child.weight):
                kept += 1
                continue
            setattr(module, name, Int8Linear(child.weight, child.bias, kernel=kernel))
            swapped += 1
        else:
            more, stayed = swap_linears(child, kernel)
            swapped, kept = swapped + more, kept + stayed
    return swapped, kept
