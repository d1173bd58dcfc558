"""The dtypes a model's weights may be stored in: one table for every reader, a Hugging Face directory's tensors
and the dtype its config.json names as an encdec checkpoint's tensors.

A floating parameter filled from a tensor of any other dtype (int32, bool, float8 without its scales) would be
cast in silence: an int32 head becomes whole numbers and generates nothing. It is refused instead, in one
sentence naming the tensor.
"""

import torch

from encdec.schema import short

STORED_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,  # read as the model's dtype, as transformers reads it
}
SAID = ", ".join(STORED_DTYPES)


def dtype_problem(tensor: torch.Tensor, param: torch.Tensor) -> str | None:
    """Why stored `tensor` cannot fill `param` (the rest of "NAME ... "), or None where it can: a floating
    parameter takes a tensor of STORED_DTYPES, any other (an integer buffer) one of its own kind."""
    if not param.is_floating_point():
        return f"holds {tensor.dtype} values, not {param.dtype}" if tensor.dtype.is_floating_point else None
    if tensor.dtype in STORED_DTYPES.values():
        return None
    return f"holds {tensor.dtype} values, where a weight is stored as one of {SAID}"


def named_dtype_problem(value: object) -> str | None:
    """Why a config.json's dtype (or torch_dtype) `value` is not a dtype a weight is stored in (None where it is,
    or where the file names none)."""
    if value is None or (isinstance(value, str) and value in STORED_DTYPES):
        return None
    return f"must be one of {SAID}, got {short(value, 40)}"
