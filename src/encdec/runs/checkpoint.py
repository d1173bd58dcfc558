"""Checkpoints that resume exactly and are written atomically, and the one loader of their weights.

What a checkpoint holds is `CheckpointDir`'s (runs/run_dir.py: weights, optimizer, RNG states,
training state, config, tokenizer, generation defaults, and the model config and text format that
describe it to inference, runs/description.py), and where it goes the `RunDir`'s.

A checkpoint is written into a temporary directory and renamed into place, and
`latest` is replaced atomically after it, so a kill at any moment leaves the
previous checkpoint whole and named. Loading never unpickles code: safetensors
for tensors, `torch.load(weights_only=True)` for the optimizer, JSON for the rest.
A step directory this training did not write is never deleted or written over:
pruning takes only those older than the one just saved, and one already holding
the name being saved is set aside. A run whose `latest` pointer is lost gets it
back from its newest complete checkpoint (`recover_latest`).

A checkpoint declares the parts it holds by its own config.yaml (`declared_parts`: the parts every
checkpoint holds, and those its config keeps, CheckpointDir.KEPT_BY: training.ema_decay's
ema.safetensors, say; of the config, only those keys are read here, the training config that checks
the whole of it being encdec.training's). A resume requires each declared part present and readable, and the numbers of
the weights, the optimizer state and the EMA finite (CheckpointDir.FINITE); a missing or damaged part
is one sentence naming the file, never a fresh start of what it held.

A checkpoint may also point at weights kept elsewhere (a LoRA run's base, a distilled run's teacher):
runs/pointer.py reads and checks those parts.
"""

import errno
import json
import logging
import math
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.interop.checkpoint_files import load_tensor_pickle
from encdec.models.weight_dtypes import dtype_problem
from encdec.runs.run_dir import TMP_NAME, CheckpointDir, RunDir
from encdec.safe_paths import check_not_symlink, inside, write_atomic
from encdec.schema import read_yaml_file, short

log = logging.getLogger(__name__)
FREE_WHEN_FULL = 64 << 20  # bytes: a failed write with less free space than this was a full disk


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_pointer(directory: Path, name: str, target: str) -> None:
    write_atomic(directory / name, target + "\n")  # a fresh temporary: a link planted anywhere is never written


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
    then the first key or shape torch names (its first line only names the model class). A tensor of
    a dtype its parameter is not stored in (integers for float weights, which torch would silently convert:
    models.weight_dtypes, as a Hugging Face directory's) is refused."""
    expected = model.state_dict()
    for name, tensor in weights.items():
        problem = dtype_problem(tensor, expected[name]) if name in expected else None
        if problem:
            raise CheckpointError(f"{mismatch} ({name} {problem})")
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0]
        raise CheckpointError(f"{mismatch} ({detail[:200]})") from None


def save_checkpoint(run: RunDir, step: int, files: dict, keep_last: int, is_best: bool = False) -> CheckpointDir:
    """Write checkpoint `step` atomically. `files` holds: model (state dict), optimizer
    (state dict), rng (dict of tensors), state (JSON-able dict), config (a callable writing
    config.yaml into a directory), tokenizer (an object with `save(directory)`), the JSON-able parts
    that describe it (`runs.description.description_files`: model_config, text and a LoRA run's adapter)
    and, optionally, generation (JSON-able generation defaults), base (a LoRA run's base pointer,
    JSON-able), ema (training.ema_decay's average of the weights, a state dict) and teacher (a distilled
    run's teacher pointer, JSON-able)."""
    root = run.checkpoints
    check_not_symlink(root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:08d}"
    tmp, final = inside(root, f".{name}.tmp"), inside(root, name)  # neither may be a symlink
    shutil.rmtree(tmp, ignore_errors=True)
    previous = run.pointer("latest")
    try:
        _write_parts(tmp, files)
    except (OSError, RuntimeError, SafetensorError) as error:  # a full disk, a quota, an I/O error
        reason = _reason(error, root)  # before the partial files go: they show how full the disk is
        shutil.rmtree(tmp, ignore_errors=True)
        kept = f"the previous checkpoint is intact ({previous})" if previous else "no checkpoint was kept"
        raise CheckpointError(f"writing checkpoint {name} into {root} failed ({reason}); {kept}") from None
    if final.exists():
        _set_aside(final)
    os.rename(tmp, final)
    fsync_dir(root)
    _write_pointer(root, "latest", name)
    if is_best:
        _write_pointer(root, "best", name)
    _prune(run, keep_last, step)
    return CheckpointDir(final)


def _set_aside(path: Path) -> Path:
    """Rename a step directory this training did not write (a resume from an earlier `latest`) to
    NAME.replaced-N, which nothing loads or prunes: encdec never deletes a checkpoint it did not write."""
    n = 1
    while path.with_name(f"{path.name}.replaced-{n}").exists():
        n += 1
    aside = path.with_name(f"{path.name}.replaced-{n}")
    os.rename(path, aside)
    log.warning("%s already existed (newer than the checkpoint resumed from); kept as %s", path.name, aside.name)
    return aside


def saved_values(checkpoint: CheckpointDir) -> dict:
    """The mapping a checkpoint's config.yaml holds, read within the bounds of any config file but otherwise
    unchecked (encdec.training.run_config.saved_config checks it whole); CheckpointError where it cannot be read."""
    try:
        if not checkpoint.config.is_file():
            raise ConfigError(f"config file {checkpoint.config} does not exist")
        return read_yaml_file(checkpoint.config)
    except ConfigError as error:
        raise CheckpointError(f"the config saved in {checkpoint.path} cannot be read: {error}") from None


def declared_parts(checkpoint: CheckpointDir, values: dict) -> list[str]:
    """The parts `checkpoint` holds by `values`, its own config's mapping (`saved_values`): every part but the
    optional ones, and each optional one that a key of its config keeps (CheckpointDir.KEPT_BY:
    training.ema_decay's EMA, ...)."""
    kept = [part for part, key in checkpoint.KEPT_BY.items() if config_value(values, key)]
    return [part for part in checkpoint.PARTS if part not in checkpoint.OPTIONAL or part in kept]


def config_value(values: dict, dotted: str) -> object:
    """The value at a dotted key ("training.ema_decay") of a config's mapping; None where any part is missing."""
    for name in dotted.split("."):
        values = values.get(name) if isinstance(values, dict) else None
    return values


def is_complete(checkpoint: CheckpointDir) -> bool:
    """Whether `checkpoint` holds every part it declares (`declared_parts`), none a symlink."""
    try:
        needed = declared_parts(checkpoint, saved_values(checkpoint))
    except CheckpointError:
        return False
    return all((checkpoint.path / part).exists() and not (checkpoint.path / part).is_symlink() for part in needed)


def recover_latest(run: RunDir, resume: bool) -> None:
    """Before a training: where checkpoints/ holds step directories but no `latest` pointer, a resume
    points `latest` at the newest complete one (with a warning) and a new training is refused, since it
    would start over beside them."""
    steps = run.step_dirs()
    if run.pointer("latest") is not None or not steps:
        return
    if not resume:
        raise ConfigError(
            f"{run.path} holds checkpoints up to {steps[-1].name} but no checkpoints/latest pointer; pass --resume "
            "to continue from the newest complete one, or choose another --out"
        )
    complete = [path for path in steps if is_complete(CheckpointDir(path))]
    if not complete:
        raise CheckpointError(
            f"{run.checkpoints} holds no complete checkpoint to resume from and no latest pointer; "
            "move its step directories away to start over"
        )
    _write_pointer(run.checkpoints, "latest", complete[-1].name)
    log.warning("%s had lost its latest pointer; resuming from %s", run.path, complete[-1].name)


def _write_parts(tmp: Path, files: dict) -> None:
    tmp.mkdir()
    parts = CheckpointDir(tmp)
    save_weights(files["model"], parts.model)
    torch.save(files["optimizer"], parts.optimizer)
    save_file({k: v.contiguous() for k, v in files["rng"].items()}, parts.rng)
    parts.state.write_text(json.dumps(files["state"]))
    files["config"](parts.config)
    files["tokenizer"].save(parts.tokenizer)
    if files.get("ema"):
        save_weights(files["ema"], parts.ema)
    write_json_parts(parts, files)
    for path in tmp.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


JSON_PARTS = {  # files' keys -> the JSON parts they are written as
    "generation": CheckpointDir.GENERATION,
    "base": CheckpointDir.BASE,
    "teacher": CheckpointDir.TEACHER,
    "model_config": CheckpointDir.MODEL_CONFIG,
    "text": CheckpointDir.TEXT,
    "adapter": CheckpointDir.ADAPTER,
}


def write_json_parts(checkpoint: CheckpointDir, files: dict) -> None:
    """Each JSON part `files` holds (JSON_PARTS) into `checkpoint`, a directory being written (a temporary one,
    renamed into place whole); one `files` holds as None or empty is not written."""
    for key, name in JSON_PARTS.items():
        if files.get(key):
            checkpoint.part(name).write_text(json.dumps(files[key], indent=2) + "\n")


# what torch's and safetensors' writers say when a write fails: the disk is full where little space is left
WRITE_FAILED = ("file write failed", "enforce fail", "failed writing file", "unexpected pos")


def _reason(error: BaseException, root: Path) -> str:
    """Why writing a checkpoint into `root` failed, in a few words: a full disk however the writer says it."""
    text = str(error)
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    if "No space left" in text or "os error 28" in text:
        return "the disk is full"
    if any(phrase in text for phrase in WRITE_FAILED):
        return "the disk is full" if _free_bytes(root) < FREE_WHEN_FULL else "a file could not be written"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return text.splitlines()[0][:120] if text else type(error).__name__


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def _prune(run: RunDir, keep_last: int, saved_step: int) -> None:
    """Delete old checkpoints and stale temporaries: only real directories named as `save_checkpoint` names
    them, never a symlink or a file someone else put in checkpoints/, and never one newer than `saved_step`."""
    root = run.checkpoints
    protected = {run.pointer("latest"), run.pointer("best")}
    ours = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    steps = [p for p in run.step_dirs() if int(p.name[5:]) <= saved_step]
    for old in steps[:-keep_last] if keep_last > 0 else []:
        if old.name not in protected:
            shutil.rmtree(old, ignore_errors=True)
    for stale in ours:  # left by a kill during a save
        if TMP_NAME.fullmatch(stale.name):
            shutil.rmtree(stale, ignore_errors=True)


def load_checkpoint(checkpoint: CheckpointDir) -> dict:
    """Read every part of `checkpoint` a resume takes: model, optimizer, rng, state and (where its config
    keeps one) ema. Each part it declares must be there, and every number of the FINITE parts finite;
    CheckpointError naming the first part that is missing or bad."""
    path = checkpoint.path
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    for part in checkpoint.PARTS:
        checkpoint.part(part)  # a symlink would read a file outside the checkpoint
    declared = declared_parts(checkpoint, saved_values(checkpoint))
    for part in declared:
        if not (path / part).exists():
            key = checkpoint.KEPT_BY.get(part)
            why = f", which its config keeps ({key} is set)" if key else ""
            raise CheckpointError(f"checkpoint {path} has no {part}{why}; the checkpoint is incomplete")
    parts = {"model": load_weights(checkpoint.model)}
    try:
        parts["optimizer"] = load_tensor_pickle(checkpoint.optimizer)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} has no optimizer.pt") from None
    try:
        parts["rng"] = load_file(checkpoint.rng)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{checkpoint.rng} is corrupt or truncated ({_first_line(error)})") from None
    try:
        parts["state"] = json.loads(checkpoint.state.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{checkpoint.state} is corrupt or truncated ({_first_line(error)})") from None
    if checkpoint.EMA in declared:
        parts["ema"] = load_weights(checkpoint.ema)
    for key, part in (("model", checkpoint.MODEL), ("optimizer", checkpoint.OPTIMIZER), ("ema", checkpoint.EMA)):
        if part in checkpoint.FINITE and key in parts:
            check_finite(parts[key], checkpoint.part(part))
    return parts


def check_finite(values: object, path: Path, name: str = "") -> None:
    """Every float in `values` (a state dict, or an optimizer's nested state) finite, else CheckpointError
    naming `path` and the first entry holding NaN or infinity."""
    if isinstance(values, dict):
        for key, value in values.items():
            check_finite(value, path, f"{name}.{key}" if name else str(key))
        return
    if isinstance(values, (list, tuple)):
        for i, value in enumerate(values):
            check_finite(value, path, f"{name}[{i}]")
        return
    finite = (
        bool(torch.isfinite(values).all())
        if isinstance(values, torch.Tensor) and values.is_floating_point()
        else not isinstance(values, float) or math.isfinite(values)
    )
    if not finite:
        raise CheckpointError(
            f"{path} holds NaN or infinite values (in {short(name, 80)}); the checkpoint is damaged, "
            "resume from an earlier one"
        )


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0][:120] if str(error) else type(error).__name__
