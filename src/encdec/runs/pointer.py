"""A checkpoint's pointer parts: weights it points at instead of holding (a LoRA run's base, a distilled run's
teacher), as a small JSON part naming them and their hash (`weights_sha256`), read back by `read_pointer`. The
directory it names (`source`) is the real path encdec read, as encdec wrote it: absolute, with no '.', '..' or
symlink on the way, a directory, and for a run a checkpoint directory in its checkpoints/.
"""

import hashlib
import os
import re
from pathlib import Path
from typing import Annotated, TypeVar

import torch

from encdec.errors import CheckpointError, ConfigError
from encdec.runs.run_dir import MADE_NAME, STEP_NAME
from encdec.schema import Satisfies, load_json, read, short

MAX_NAME_CHARS = 4096  # a path or Hub id a pointer part names: PATH_MAX on Linux
T = TypeVar("T")


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def is_name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and "\0" not in value


def is_plain_path(value: object) -> bool:
    """An absolute path as os.path.normpath writes it: no '.', '..' or empty component ('//' included)."""
    return is_name(value) and value.startswith("/") and not value.startswith("//") and os.path.normpath(value) == value


# the fields of a pointer part (runs/adapter.py's BasePointer, training/distill.py's TeacherPointer)
SHA256 = Annotated[str, Satisfies(is_sha256, "64 lowercase hex digits (a SHA-256)")]
NAME = Annotated[str, Satisfies(is_name, f"a path or Hub id of 1 to {MAX_NAME_CHARS:,} characters")]
SOURCE = Annotated[
    str, Satisfies(is_plain_path, f"an absolute path of at most {MAX_NAME_CHARS:,} characters without '.' or '..'")
]


def weights_sha256(weights: dict[str, torch.Tensor]) -> str:
    """A hash of a state dict: every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        tensor = weights[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def source_path(path: Path) -> str:
    """What a pointer part keeps of the directory `path` that was read: its real path (absolute, no link)."""
    return os.path.realpath(path)


def read_pointer(path: Path, schema: type[T], what: str) -> T | None:
    """A checkpoint's pointer part at `path` (base.json, teacher.json) as `schema`, the `what` it is
    ("base pointer"); None where the checkpoint has none, one CheckpointError sentence where it is not one,
    or where the directory it names (its `source`, of its `kind`) breaks the rules of `check_source`."""
    if not path.exists():
        return None
    try:
        pointer = read(schema, load_json(path, f"the {what}", CheckpointError), "")
    except ConfigError as error:
        raise CheckpointError(f"{path} is not a {what} encdec writes ({error})") from None
    check_source(pointer.source, pointer.kind, f"{path} names")
    return pointer


def check_source(source: str, kind: str, says: str) -> None:
    """The directory a pointer part names, as encdec wrote it (`source_path`): its real path, so no
    component is a symlink (one planted since would lead the read elsewhere), a directory where it exists
    (a pointer to what is gone is read by its name again), and for a run (`kind` "run") a checkpoint
    directory inside the run's checkpoints/, as `RunDir.checkpoint` names them. `says` starts the sentence."""
    where = short(source)
    if os.path.realpath(source) != source:
        raise CheckpointError(f"{says} {where}, which passes through a symlink; encdec follows no link in a pointer")
    if os.path.lexists(source) and not os.path.isdir(source):
        raise CheckpointError(f"{says} {where}, which is not a directory")
    name, parent = os.path.basename(source), os.path.basename(os.path.dirname(source))
    if kind == "run" and (parent != "checkpoints" or not (STEP_NAME.fullmatch(name) or MADE_NAME.fullmatch(name))):
        raise CheckpointError(f"{says} {where}, which is not a checkpoint directory (RUN/checkpoints/step_XXXXXXXX)")
