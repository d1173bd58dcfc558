"""Checkpoint averaging (fairseq's average_checkpoints.py, OpenNMT-py's average_models.py): the element-wise
mean of each weight over several checkpoints of one run, written as a checkpoint of its own.

    average_checkpoints("runs/wmt", last=5)           # -> runs/wmt/checkpoints/avg5_step_00010000
    average_checkpoints("runs/wmt", steps=[8000, 10000], out="runs/wmt-avg")   # a new run directory
    export_ema("runs/wmt")                            # -> runs/wmt/checkpoints/ema_step_00010000

Inside the run, the averaged checkpoint sits beside the step directories under a name (`MADE_NAME`)
that `--checkpoint` and `from_pretrained(..., checkpoint=)` take, but that no pointer, prune or resume
ever picks: it holds weights, config, tokenizer, generation defaults and the model config and text format
that describe it (runs/description.py, written anew from the config of a checkpoint older than them), no
optimizer state. With `out`
it becomes the one checkpoint (latest and best) of a new run directory. Each mean is summed in float64
and cast back to the tensor's dtype, so averaging N identical checkpoints gives that checkpoint bit for
bit (a float32 sum of N copies divided by N need not); integer tensors are the newest checkpoint's.
A LoRA run is refused: its checkpoints hold adapters whose mean is not the mean of the merged weights.
"""

import json
import os
import shutil
from pathlib import Path

import torch

from encdec.errors import CheckpointError, ConfigError
from encdec.runs.checkpoint import fsync_dir, load_weights, save_weights
from encdec.runs.description import describe, write_description
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.safe_paths import check_not_symlink, inside, output_path, refuse_unsafe_output, write_atomic
from encdec.tokenizers import load_tokenizer

AVERAGE = "average.json"  # in an averaged checkpoint: the steps it averaged (or the EMA it holds)


def average_checkpoints(
    run_dir: str | Path, last: int | None = None, steps: list[int] | None = None, out: str | Path | None = None
) -> CheckpointDir:
    """Average the weights of the run's `last` N checkpoints (or those of `steps`) into a new checkpoint of
    the run, or into a new run directory `out`; returns where it was written."""
    run = RunDir(run_dir)
    chosen = pick_checkpoints(run, last, steps)
    newest = chosen[-1]
    if describe(newest, load_tokenizer(newest.tokenizer)).adapter is not None:
        raise ConfigError(
            f"{run.path} is a LoRA run, whose checkpoints hold adapters alone; average full fine-tunes, or export "
            "the merged model and average those runs"
        )
    weights = mean_weights(chosen)
    about = {"kind": "average", "steps": [step_of(c) for c in chosen]}
    return write_made(run, newest, weights, f"avg{len(chosen)}_step_{step_of(newest):08d}", about, out)


def export_ema(run_dir: str | Path, checkpoint: str = "latest", out: str | Path | None = None) -> CheckpointDir:
    """The EMA weights a checkpoint keeps (training.ema_decay) as a checkpoint of their own, named
    ema_step_XXXXXXXX in the run (or the one checkpoint of a new run directory `out`)."""
    run = RunDir(run_dir)
    source = run.checkpoint(checkpoint)
    ema = source.part(source.EMA)
    if not ema.is_file():
        raise CheckpointError(f"{source.path} holds no EMA weights; train with training.ema_decay set to keep them")
    about = {"kind": "ema", "steps": [step_of(source)]}
    return write_made(run, source, load_weights(ema), f"ema_step_{step_of(source):08d}", about, out)


def pick_checkpoints(run: RunDir, last: int | None, steps: list[int] | None) -> list[CheckpointDir]:
    """The step directories to average, oldest first: the newest `last`, or exactly those of `steps`."""
    if (last is None) == (steps is None):
        raise ConfigError("name the checkpoints to average: --last N or --steps 1000,2000 (one of the two)")
    if not run.is_run():
        raise CheckpointError(f"{run.path} is not a run directory of encdec train (it has no checkpoints/latest)")
    found = {step_of(CheckpointDir(p)): CheckpointDir(p) for p in run.step_dirs()}
    if last is not None:
        if last < 1:
            raise ConfigError(f"--last must be at least 1, got {last}")
        if last > len(found):
            raise ConfigError(f"--last {last} asks for {last} checkpoints but {run.path} keeps {len(found)}")
        return [found[s] for s in sorted(found)[-last:]]
    if len(set(steps)) != len(steps):
        raise ConfigError("--steps names a step twice; each checkpoint is averaged once")
    missing = [s for s in steps if s not in found]
    if missing:
        kept = ", ".join(str(s) for s in sorted(found)) or "none"
        raise ConfigError(f"{run.path} has no checkpoint of step {missing[0]} (it keeps steps {kept})")
    return [found[s] for s in sorted(steps)]


def step_of(checkpoint: CheckpointDir) -> int:
    return int(checkpoint.name.rpartition("_")[2])


def mean_weights(checkpoints: list[CheckpointDir]) -> dict[str, torch.Tensor]:
    """The element-wise mean of each floating tensor over `checkpoints` (float64 sums, cast back to each
    tensor's dtype), read one checkpoint at a time; tensors stored once under two names stay shared."""
    first = load_weights(checkpoints[0].model)
    sums = {name: t.double() if t.is_floating_point() else t for name, t in first.items()}
    for checkpoint in checkpoints[1:]:
        weights = load_weights(checkpoint.model)
        check_same_shapes(first, weights, checkpoints[0], checkpoint)
        for name, tensor in weights.items():
            sums[name] = sums[name] + tensor.double() if tensor.is_floating_point() else tensor
    means, made = {}, {}  # made: id of a first-checkpoint tensor -> its mean, so aliases stay one tensor
    for name, tensor in first.items():
        if id(tensor) not in made:
            total = sums[name]
            made[id(tensor)] = (total / len(checkpoints)).to(tensor.dtype) if tensor.is_floating_point() else total
        means[name] = made[id(tensor)]
    return means


def check_same_shapes(first: dict, other: dict, a: CheckpointDir, b: CheckpointDir) -> None:
    """CheckpointError where two checkpoints do not hold the same tensors of the same shapes and dtypes."""
    if first.keys() != other.keys():
        name = sorted(first.keys() ^ other.keys())[0]
        raise CheckpointError(f"{a.name} and {b.name} hold different weights ({name} is in one only); not averaged")
    for name, tensor in first.items():
        if tensor.shape != other[name].shape or tensor.dtype != other[name].dtype:
            raise CheckpointError(
                f"{a.name} and {b.name} are different architectures ({name} is {tuple(tensor.shape)} "
                f"{tensor.dtype} in one, {tuple(other[name].shape)} {other[name].dtype} in the other); not averaged"
            )


def write_made(
    run: RunDir, source: CheckpointDir, weights: dict, name: str, about: dict, out: str | Path | None
) -> CheckpointDir:
    """Write `weights` with `source`'s config, tokenizer and generation defaults as checkpoint `name` of
    `run`, or as the one checkpoint of a new run directory `out`; atomically (a temporary renamed into place)."""
    if out is not None:
        return _write_run(run, source, weights, about, Path(out))
    check_not_symlink(run.checkpoints)
    output_path(run.checkpoints, "the run's checkpoints")
    final, tmp = inside(run.checkpoints, name, "checkpoint"), inside(run.checkpoints, f".{name}.tmp", "checkpoint")
    if final.exists():
        raise ConfigError(f"{final} already exists; encdec never writes over a checkpoint, delete it to make it anew")
    _write_checkpoint(tmp, source, weights, about)
    os.rename(tmp, final)
    fsync_dir(run.checkpoints)
    return CheckpointDir(final)


def _write_run(run: RunDir, source: CheckpointDir, weights: dict, about: dict, out: Path) -> CheckpointDir:
    """A new run directory `out` whose only checkpoint (latest and best) holds `weights`."""
    refuse_unsafe_output(out)
    output_path(out, "--out")
    if Path(os.path.realpath(out)).is_relative_to(os.path.realpath(run.path)):
        raise ConfigError(f"--out {out} is inside the run {run.path}; write the new run directory beside it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} exists and is not an empty directory; choose a new one")
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    new = RunDir(tmp)
    step = f"step_{source.name.rpartition('_')[2]}"
    try:
        _write_checkpoint(new.checkpoints / step, source, weights, about)
        shutil.copyfile(source.config, new.config)
        write_atomic(new.checkpoints / "latest", step + "\n")
        write_atomic(new.checkpoints / "best", step + "\n")
        new.mark()
        if out.exists():
            out.rmdir()  # empty, checked above
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return RunDir(out).step_dir(step)


def _write_checkpoint(tmp: Path, source: CheckpointDir, weights: dict, about: dict) -> None:
    """A checkpoint directory at `tmp`: `weights`, and `source`'s config, tokenizer, generation defaults and
    description."""
    description = describe(source, load_tokenizer(source.tokenizer))  # a bad one refused before any writing
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    made = CheckpointDir(tmp)
    try:
        save_weights(weights, made.model)
        shutil.copyfile(source.config, made.config)
        shutil.copytree(source.tokenizer, made.tokenizer, symlinks=True)
        write_description(made, description)
        if source.generation.is_file():
            shutil.copyfile(source.generation, made.generation)
        (tmp / AVERAGE).write_text(json.dumps(about) + "\n")
        for path in tmp.rglob("*"):
            if path.is_file():
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
