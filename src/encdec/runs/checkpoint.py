"""Checkpoints that resume exactly and are written atomically, and the one loader of their weights.

What a checkpoint holds is `CheckpointDir`'s (runs/run_dir.py: weights, optimizer, RNG states,
training state, config, tokenizer, generation defaults), and where it goes the `RunDir`'s.

A checkpoint is written into a temporary directory and renamed into place, and
`latest` is replaced atomically after it, so a kill at any moment leaves the
previous checkpoint whole and named. Loading never unpickles code: safetensors
for tensors, `torch.load(weights_only=True)` for the optimizer, JSON for the rest.
"""

import errno
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from encdec.errors import CheckpointError
from encdec.runs.run_dir import STEP_NAME, TMP_NAME, CheckpointDir, RunDir
from encdec.safe_paths import check_not_symlink, inside


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_pointer(directory: Path, name: str, target: str) -> None:
    tmp = directory / f".{name}.tmp"
    check_not_symlink(tmp)
    tmp.write_text(target + "\n")
    os.replace(tmp, directory / name)


def save_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    """Save a state dict with safetensors, storing tensors that share memory once."""
    tensors, aliases, seen = {}, {}, {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            tensors[name] = tensor.detach().cpu().contiguous()
    save_file(tensors, path, metadata={"aliases": json.dumps(aliases)})


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        tensors = load_file(path)
        from safetensors import safe_open

        with safe_open(path, "pt") as f:
            aliases = json.loads((f.metadata() or {}).get("aliases", "{}"))
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is corrupt or truncated ({error})") from None
    for alias, name in aliases.items():
        tensors[alias] = tensors[name]
    return tensors


def load_state(model: nn.Module, weights: dict[str, torch.Tensor], mismatch: str) -> None:
    """Load `weights` into `model`; where they do not fit, one sentence (CheckpointError): `mismatch`,
    then the first key or shape torch names (its first line only names the model class)."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0]
        raise CheckpointError(f"{mismatch} ({detail[:200]})") from None


def save_checkpoint(run: RunDir, step: int, files: dict, keep_last: int, is_best: bool = False) -> CheckpointDir:
    """Write checkpoint `step` atomically. `files` holds: model (state dict), optimizer
    (state dict), rng (dict of tensors), state (JSON-able dict), config (a callable writing
    config.yaml into a directory), tokenizer (an object with `save(directory)`) and, optionally,
    generation (JSON-able generation defaults)."""
    root = run.checkpoints
    check_not_symlink(root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:08d}"
    tmp, final = inside(root, f".{name}.tmp"), inside(root, name)  # neither may be a symlink
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_parts(tmp, files)
    except (OSError, RuntimeError, SafetensorError) as error:  # a full disk, a quota, an I/O error
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"writing checkpoint {name} into {root} failed ({_reason(error)}); nothing of it was "
            "kept and the previous checkpoint is intact"
        ) from None
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    _write_pointer(root, "latest", name)
    if is_best:
        _write_pointer(root, "best", name)
    _prune(run, keep_last)
    return CheckpointDir(final)


def _write_parts(tmp: Path, files: dict) -> None:
    tmp.mkdir()
    parts = CheckpointDir(tmp)
    save_weights(files["model"], parts.model)
    torch.save(files["optimizer"], parts.optimizer)
    save_file({k: v.contiguous() for k, v in files["rng"].items()}, parts.rng)
    parts.state.write_text(json.dumps(files["state"]))
    files["config"](parts.config)
    files["tokenizer"].save(parts.tokenizer)
    if files.get("generation"):
        parts.generation.write_text(json.dumps(files["generation"], indent=2) + "\n")
    for path in tmp.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return "the disk is full"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error).splitlines()[0][:120] if str(error) else type(error).__name__


def _prune(run: RunDir, keep_last: int) -> None:
    """Delete old checkpoints and stale temporaries: only real directories named as `save_checkpoint` names
    them, never a symlink or a file someone else put in checkpoints/."""
    root = run.checkpoints
    protected = {run.pointer("latest"), run.pointer("best")}
    ours = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    steps = sorted((p for p in ours if STEP_NAME.fullmatch(p.name)), key=lambda p: int(p.name[5:]))
    for old in steps[:-keep_last] if keep_last > 0 else []:
        if old.name not in protected:
            shutil.rmtree(old, ignore_errors=True)
    for stale in ours:  # left by a kill during a save
        if TMP_NAME.fullmatch(stale.name):
            shutil.rmtree(stale, ignore_errors=True)


def load_checkpoint(checkpoint: CheckpointDir) -> dict:
    """Read every part of `checkpoint`; CheckpointError if any part is bad."""
    path = checkpoint.path
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    for part in checkpoint.PARTS:
        checkpoint.part(part)  # a symlink would read a file outside the checkpoint
    parts = {"model": load_weights(checkpoint.model)}
    try:
        parts["optimizer"] = torch.load(checkpoint.optimizer, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} has no optimizer.pt") from None
    except Exception as error:  # unpickling refused (a pickle payload) or a truncated file
        kind = (
            "carries pickled objects other than tensors" if "weights_only" in str(error) else "is corrupt or truncated"
        )
        raise CheckpointError(f"{checkpoint.optimizer} {kind}; refusing to load it") from None
    try:
        parts["rng"] = load_file(checkpoint.rng)
        parts["state"] = json.loads(checkpoint.state.read_text())
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({error})") from None
    return parts
