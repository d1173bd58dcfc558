"""Catch device mix-ups on a CPU-only machine: CUDA's refusals, simulated by tagging tensors.

On a GPU, `cuda_tensor + cpu_tensor` raises; on a CPU every tensor lives in one
place, so code that forgets a `device=` passes every CPU test and crashes on the
first GPU. `DeviceCheck` is a TorchFunctionMode that tags each tensor it sees:

    "device"  parameters and buffers moved by `.to(device)`, tensors made with
              `device=`, results of `.to(device)` / `.cuda()`, and anything
              computed from a device tensor
    "host"    factories called without `device=` (torch.zeros, torch.arange,
              torch.tensor, torch.from_numpy, ...), `.cpu()`, and anything
              computed only from host tensors

Any named device counts as the device, `.to("cpu")` included: on a CPU the
simulated device is the CPU, so code should bring tensors back with `.cpu()`.

and fails on an op that mixes the two the way CUDA refuses (a host tensor meeting
a device tensor, except a 0-dim one in an element-wise op, which CUDA takes as a
scalar; a device index into a host tensor), or
that draws from a generator made without `device=` into device tensors. Tensors it
never saw made (autograd's gradients, say) are untagged and never blamed. It also
records host syncs (`.item()`, `.tolist()`, `bool()`, `nonzero`, ...) of device
tensors, with where they happened, so tests can assert a hot loop never waits.

    with DeviceCheck() as check:
        model.to(device); generate(model, src_ids)   # raises DeviceMixError on a mix
    assert not check.errors
"""

from __future__ import annotations

import functools
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import encdec

DEVICE, HOST = "device", "host"
TAG = "_device_check_tag"
# frames of the package under test, for locations: its own folder, wherever it is installed or cloned (a path
# fragment such as "/encdec/" would also match a clone named encdec, and torch's frames in its .venv)
PACKAGE = Path(encdec.__file__).resolve().parent
Tensor = torch.Tensor

SYNCS = {
    Tensor.item,
    Tensor.tolist,
    Tensor.__bool__,
    Tensor.__int__,
    Tensor.__float__,
    Tensor.__index__,
    Tensor.numpy,
    Tensor.nonzero,
    torch.nonzero,
    Tensor.masked_select,
    torch.masked_select,
    torch.unique,
    Tensor.unique,
    Tensor.cpu,
}
INDEXING = {Tensor.__getitem__, Tensor.__setitem__}
# element-wise ops, where CUDA takes a 0-dim CPU tensor as a scalar; anywhere else (cat, stack, indexing,
# matmul, ...) a 0-dim host tensor is refused like any other
SCALAR_OK = {
    "add",
    "sub",
    "mul",
    "div",
    "true_divide",
    "floor_divide",
    "remainder",
    "fmod",
    "pow",
    "where",
    "masked_fill",
    "clamp",
    "clip",
    "minimum",
    "maximum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "lerp",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "fill_",
    "addcmul",
    "addcdiv",
    "rsub",
    "neg",
    "abs",
    "and",
    "or",
    "xor",
    "truediv",
    "floordiv",
    "mod",
    "copysign",
    "atan2",
    "hypot",
}
NO_MIX_CHECK = {
    Tensor.to,
    Tensor.copy_,
    Tensor.__repr__,
    Tensor.__format__,
    Tensor.size,
    Tensor.dim,
    Tensor.__len__,
    Tensor.data_ptr,
    Tensor.untyped_storage,
    Tensor.__reduce_ex__,
}


class DeviceMixError(AssertionError):
    """An op that CUDA would refuse, found on the CPU."""


def tag_of(value) -> str | None:
    return getattr(value, TAG, None)


def set_tag(value, tag: str | None) -> None:
    if tag is not None and isinstance(value, Tensor):
        try:
            setattr(value, TAG, tag)
        except (AttributeError, RuntimeError):  # some internal tensors refuse attributes
            pass


def location() -> str:
    """The innermost frame of the package under test, as path:line."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        within = in_package(frame.filename)
        if within is not None:
            return f"{within}:{frame.lineno}"
    frame = traceback.extract_stack()[-4]
    return f"{frame.filename}:{frame.lineno}"


@functools.cache
def in_package(filename: str) -> str | None:
    """A frame's file relative to the package under test, or None for a file outside it (torch's, a test's)."""
    path = Path(filename).resolve()
    return path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else None


def name_of(func) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


@dataclass
class Sync:
    op: str
    where: str


@dataclass
class DeviceCheck(TorchFunctionMode):
    """Tag tensors as device or host, raise DeviceMixError on a mix, record host syncs."""

    raise_errors: bool = True
    errors: list[str] = field(default_factory=list)
    syncs: list[Sync] = field(default_factory=list)

    def __post_init__(self):
        super().__init__()

    # -- entering and leaving: torch.from_numpy and torch.Generator are not torch functions, so patch them
    def __enter__(self):
        self._from_numpy, self._generator = torch.from_numpy, torch.Generator
        torch.from_numpy = _host_from_numpy(self._from_numpy)
        torch.Generator = TaggedGenerator
        return super().__enter__()

    def __exit__(self, *exc):
        torch.from_numpy, torch.Generator = self._from_numpy, self._generator
        return super().__exit__(*exc)

    def tag_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Mark a module's parameters and buffers as on the device (for modules built outside the check)."""
        for tensor in (*module.parameters(), *module.buffers()):
            set_tag(tensor, DEVICE)
        return module

    def fail(self, message: str) -> None:
        self.errors.append(message)
        if self.raise_errors:
            raise DeviceMixError(message)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves, _ = tree_flatten((args, kwargs))
        tensors = [t for t in leaves if isinstance(t, Tensor)]
        tags = [tag_of(t) for t in tensors]
        self._check(func, args, kwargs, tensors, tags)
        result = func(*args, **kwargs)
        if func is Tensor.to and result is args[0] and tags[0] == HOST and _moved_tag(args, kwargs, HOST) == DEVICE:
            result = result.view_as(result)  # on CUDA the host original stays on the host: tag a new alias
        self._tag_result(func, args, kwargs, tensors, tags, result)
        return result

    def _check(self, func, args, kwargs, tensors, tags) -> None:
        where = None
        if func in SYNCS and args and tag_of(args[0]) == DEVICE:
            where = location()
            self.syncs.append(Sync(name_of(func), where))
        if func in INDEXING and len(args) >= 2:
            self._check_indexing(func, args)
            return
        if func in NO_MIX_CHECK:
            return
        generator = kwargs.get("generator")
        targets_device = DEVICE in tags or (kwargs.get("device") is not None)
        if generator is not None and targets_device and getattr(generator, "where", None) == HOST:
            self.fail(
                f"{name_of(func)} at {where or location()} draws device tensors from a generator "
                "made without device= (a CPU generator on CUDA tensors)"
            )
        if DEVICE in tags:
            scalars_ok = _base_name(func) in SCALAR_OK
            host = [t for t, tag in zip(tensors, tags, strict=True) if tag == HOST and (t.dim() > 0 or not scalars_ok)]
            if host:
                shapes = ", ".join(str(tuple(t.shape)) for t in host)
                self.fail(
                    f"{name_of(func)} at {where or location()} mixes device tensors with host "
                    f"tensors of shape {shapes} (made without device=)"
                )

    def _check_indexing(self, func, args) -> None:
        indexed, index = args[0], args[1]
        index_leaves, _ = tree_flatten(index)
        if tag_of(indexed) == HOST and any(tag_of(t) == DEVICE for t in index_leaves if isinstance(t, Tensor)):
            self.fail(f"{name_of(func)} at {location()} indexes a host tensor with a device index")
        if any(isinstance(t, Tensor) and t.dtype == torch.bool and tag_of(t) == DEVICE for t in index_leaves):
            self.syncs.append(Sync("boolean-mask indexing", location()))
        if func is Tensor.__setitem__ and len(args) == 3 and isinstance(args[2], Tensor):
            value = args[2]
            advanced = any(isinstance(t, Tensor) for t in index_leaves)
            if advanced and {tag_of(indexed), tag_of(value)} == {HOST, DEVICE} and value.dim() > 0:
                self.fail(f"{name_of(func)} at {location()} scatters between host and device tensors")

    def _tag_result(self, func, args, kwargs, tensors, tags, result) -> None:
        if func in (Tensor.cpu, Tensor.numpy, Tensor.tolist, Tensor.pin_memory):
            tag = HOST
        elif func is Tensor.cuda:
            tag = DEVICE
        elif func is Tensor.to:
            tag = _moved_tag(args, kwargs, tags[0] if tags else None)
        elif kwargs.get("device") is not None:
            tag = DEVICE
        elif DEVICE in tags:
            tag = DEVICE
        elif HOST in tags or not tensors:
            tag = HOST  # a factory without device=, or arithmetic on host tensors
        else:
            tag = None
        if tag is None:
            return
        outputs, _ = tree_flatten(result)
        for out in outputs:
            if isinstance(out, Tensor) and not (func in INDEXING and out is args[0]):
                if func is not Tensor.to and any(out is t for t in tensors) and tag_of(out) is not None:
                    continue  # an in-place op keeps its input's tag
                set_tag(out, tag)


def _base_name(func) -> str:
    """ "add" for torch.add, Tensor.add, Tensor.add_, Tensor.__add__, Tensor.__radd__ and Tensor.__iadd__."""
    name = getattr(func, "__name__", "").strip("_")
    for prefix in ("r", "i"):
        if name.startswith(prefix) and name[1:] in SCALAR_OK and name not in SCALAR_OK:
            return name[1:]
    return name


def _moved_tag(args, kwargs, source: str | None) -> str | None:
    """The tag of `x.to(...)`: device when a device is named, another tensor's when one is given."""
    rest = list(args[1:]) + [kwargs.get("device"), kwargs.get("other")]
    for value in rest:
        if isinstance(value, Tensor):
            return tag_of(value)
        if isinstance(value, (str, torch.device)):
            return DEVICE  # on a CPU-only check, `.to("cpu")` is how code moves data to the simulated device
    return source


class TaggedGenerator(torch.Generator):
    """torch.Generator that remembers whether it was made for a device."""

    def __new__(cls, device=None):
        generator = torch._C.Generator.__new__(cls) if device is None else torch._C.Generator.__new__(cls, device)
        generator.where = DEVICE if device is not None else HOST
        return generator


def _host_from_numpy(original):
    def from_numpy(array):
        tensor = original(array)
        set_tag(tensor, HOST)
        return tensor

    return from_numpy


def report(check: DeviceCheck) -> str:
    return "\n".join(check.errors) or "no device mix-ups"


if __name__ == "__main__":  # a quick self-demonstration
    with DeviceCheck(raise_errors=False) as check:
        weight = torch.ones(3).to("cpu")
        weight + torch.arange(3)
    print(report(check), file=sys.stderr)
