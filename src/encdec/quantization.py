"""int8 decoding: `encdec.quantize(model, "int8")` turns a float model's linear layers into int8 ones.

Every nn.Linear (attention projections, feed-forward, the separate or tied vocabulary
projection) becomes an `Int8Linear`: int8 weights per output row, int8 activations
quantized per call, fp32 out. Embeddings, norms, position biases, recurrent cells
and MoE routers stay in fp32 (a router's argmax decides which expert runs, and its
product is tiny). The model comes back in eval mode, for inference only: int8
layers have no gradient and are not saved in checkpoints (quantize after loading).
torch's int8 kernels are CPU kernels, so a model on a GPU, or in bf16/fp16, is refused.

    model = encdec.quantize(encdec.from_pretrained("runs/multi30k"), "int8")
    model = encdec.from_pretrained("runs/multi30k", quantize="int8")   # the same
"""

import logging

import torch
from torch import nn

from encdec.errors import ConfigError
from encdec.modules.int8_linear import Int8Linear, int8_supported

log = logging.getLogger(__name__)
SCHEMES = ("int8",)
KEEP_FLOAT = ("router",)  # attribute names whose Linear stays fp32


def quantize(model: nn.Module, scheme: str = "int8") -> nn.Module:
    """`model` with its linear layers in `scheme` (only "int8"), in eval mode; changed in place."""
    if scheme not in SCHEMES:
        raise ConfigError(f"quantize must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    return quantize_int8(model)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Swap every nn.Linear of a CPU fp32 `model` for an Int8Linear (and untie a tied vocabulary
    projection into an int8 copy of the embeddings); returns the model in eval mode."""
    check_int8(model)
    swapped = swap_linears(model)
    embed = getattr(model, "embed", None)
    if hasattr(model, "lm_head") and model.lm_head is None and isinstance(embed, nn.Embedding):
        model.lm_head = Int8Linear(embed.weight)  # the tied head, int8; the embedding lookup stays fp32
        swapped += 1
    model.requires_grad_(False)
    log.info("int8: %d linear layers quantized", swapped)
    return model.eval()


def check_int8(model: nn.Module) -> None:
    """Refuse, in one sentence, a model the CPU int8 kernels cannot run."""
    if not int8_supported():
        raise ConfigError("int8 decoding needs torch's fbgemm int8 kernels, which this torch build lacks")
    if any(isinstance(m, Int8Linear) for m in model.modules()):
        raise ConfigError("this model is already quantized to int8")
    params = list(model.parameters())
    devices = {p.device.type for p in params}
    if devices - {"cpu"}:
        where = ", ".join(sorted(devices))
        raise ConfigError(f"int8 decoding runs on the CPU only (torch's int8 kernels are CPU kernels); "
                          f"the model is on {where}: move it with model.to('cpu') first")  # fmt: skip
    dtypes = {p.dtype for p in params if p.is_floating_point()}
    if dtypes - {torch.float32}:
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
        raise ConfigError(f"int8 decoding quantizes fp32 weights, and this model holds {names}: load it in fp32")


def swap_linears(module: nn.Module) -> int:
    """Replace the nn.Linear children of `module`, recursively, by Int8Linear; returns how many."""
    count = 0
    for name, child in module.named_children():
        if type(child) is nn.Linear and name not in KEEP_FLOAT:
            setattr(module, name, Int8Linear(child.weight, child.bias))
            count += 1
        else:
            count += swap_linears(child)
    return count
