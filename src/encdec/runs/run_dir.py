"""A run directory's layout, in one place: every reader and writer of a run goes through `RunDir`.

    RUN_DIR/
        config.yaml        the resolved run config
        metrics.jsonl      one record per step and per evaluation
        curves.png         the losses (and metrics) over steps
        summary.json       the finished run's figures (encdec compare reads them back)
        tensorboard/       the same records for TensorBoard
        eval/              encdec evaluate's report
        .lock              held by encdec train for the whole run (training/run_lock.py)
        .encdec-run        marks the directory as a run encdec train made (runs from before it: a latest pointer)
        checkpoints/
            step_00000100/      a CheckpointDir (what it holds: below)
            avg5_step_00000100/ encdec average's: the mean of 5 checkpoints' weights (no optimizer; never pruned)
            latest, best        the name of the newest / best checkpoint, never a path

Names read from a pointer must be a `step_XXXXXXXX` directory inside checkpoints/, and no part of
a checkpoint may be a symlink (encdec.safe_paths), so a planted file cannot lead a read elsewhere.
Training goes only into a new or empty directory or a run encdec made (`check_out`), so a mistyped
--out cannot overwrite or prune someone's files.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from encdec.errors import CheckpointError, ConfigError
from encdec.safe_paths import check_not_symlink, inside, refuse_unsafe_output, write_atomic

STEP_NAME = re.compile(r"step_\d{8,}")  # checkpoint directories: pruning deletes only these and TMP_NAME
TMP_NAME = re.compile(r"\.step_\d{8,}\.tmp")
# checkpoints encdec average writes beside the step directories (runs/weight_average.py): never listed as steps, so
# never pruned, never resumed from, never named by latest or best, only by name (--checkpoint avg5_step_00001000)
MADE_NAME = re.compile(r"(avg\d+|ema)_step_\d{8,}")


@dataclass(frozen=True)
class CheckpointDir:
    """One checkpoint: the files `save_checkpoint` writes into it, `load_checkpoint` reads back for a resume
    and `load_run` for use (the weights, the tokenizer and the DESCRIPTION parts, or config.yaml before them)."""

    path: Path

    MODEL = "model.safetensors"  # weights (shared tensors stored once, aliases in metadata)
    OPTIMIZER = "optimizer.pt"  # optimizer state: tensors and plain containers only
    RNG = "rng.safetensors"  # torch CPU (and CUDA) RNG states of every rank
    STATE = "state.json"  # training state (step, best score, ...), data position, scaler
    CONFIG = "config.yaml"  # the resolved run config
    TOKENIZER = "tokenizer"  # the tokenizer, saved by its own `save`
    GENERATION = "generation.json"  # generation defaults (from a Hugging Face checkpoint), when there are any
    BASE = "base.json"  # a LoRA run's: the base its adapter-only weights go on (runs/adapter.py)
    EMA = "ema.safetensors"  # training.ema_decay's moving average of the weights (float32), when kept
    TEACHER = "teacher.json"  # a distilled run's: the teacher it learns from (training/distill.py)
    MODEL_CONFIG = "model.json"  # the ModelConfig the weights belong to, resolved (vocabulary and ids included)
    TEXT = "text.json"  # how the model takes text: templates, padding side, source length (runs.text.TextFormat)
    ADAPTER = "adapter.json"  # a LoRA run's: the adapters' shape and what trains, to put them on base.json's base
    PARTS = (
        MODEL,
        OPTIMIZER,
        RNG,
        STATE,
        CONFIG,
        TOKENIZER,
        GENERATION,
        BASE,
        EMA,
        TEACHER,
        MODEL_CONFIG,
        TEXT,
        ADAPTER,
    )
    # what inference reads beside the weights and tokenizer (runs/description.py), never the training config;
    # a checkpoint written before them has none and is described by its config.yaml instead
    DESCRIPTION = (MODEL_CONFIG, TEXT, ADAPTER)
    OPTIONAL = (GENERATION, BASE, EMA, TEACHER, *DESCRIPTION)  # a resume reads none of the description
    # the optional parts a checkpoint declares by its own config.yaml: each is kept (and a resume requires
    # it) where the config key it names is set (runs.checkpoint.declared_parts)
    KEPT_BY = {BASE: "lora", EMA: "training.ema_decay", TEACHER: "training.distill"}
    FINITE = (MODEL, OPTIMIZER, EMA)  # the parts whose numbers must all be finite (no NaN, no infinity)

    @property
    def name(self) -> str:
        return self.path.name

    def part(self, name: str) -> Path:
        """The path of part `name`, refused if it is a symlink (it would read a file outside the checkpoint)."""
        return inside(self.path, name, "checkpoint part")

    model = property(lambda self: self.part(self.MODEL))
    optimizer = property(lambda self: self.part(self.OPTIMIZER))
    rng = property(lambda self: self.part(self.RNG))
    state = property(lambda self: self.part(self.STATE))
    config = property(lambda self: self.part(self.CONFIG))
    tokenizer = property(lambda self: self.part(self.TOKENIZER))
    generation = property(lambda self: self.part(self.GENERATION))
    base = property(lambda self: self.part(self.BASE))
    ema = property(lambda self: self.part(self.EMA))
    teacher = property(lambda self: self.part(self.TEACHER))
    model_config = property(lambda self: self.part(self.MODEL_CONFIG))
    text = property(lambda self: self.part(self.TEXT))
    adapter = property(lambda self: self.part(self.ADAPTER))

    def is_checkpoint(self) -> bool:
        """True for a directory holding a checkpoint's weights, tokenizer and what describes them (its model
        config, or the config.yaml of a checkpoint from before it): one opened on its own, out of its run."""
        weights, described, configured = (
            (self.path / name).is_file() for name in (self.MODEL, self.MODEL_CONFIG, self.CONFIG)
        )
        return weights and (described or configured) and (self.path / self.TOKENIZER).is_dir()


@dataclass(frozen=True)
class RunDir:
    """The paths of a run directory and its checkpoint pointers."""

    path: Path

    def __init__(self, path: str | Path):
        object.__setattr__(self, "path", Path(path))

    @property
    def name(self) -> str:
        return self.path.name

    config = property(lambda self: self.path / "config.yaml")
    metrics = property(lambda self: self.path / "metrics.jsonl")
    curves = property(lambda self: self.path / "curves.png")
    summary = property(lambda self: self.path / "summary.json")
    tensorboard = property(lambda self: self.path / "tensorboard")
    eval_dir = property(lambda self: self.path / "eval")
    lock = property(lambda self: self.path / ".lock")
    marker = property(lambda self: self.path / ".encdec-run")
    checkpoints = property(lambda self: self.path / "checkpoints")

    def written(self) -> tuple[Path, ...]:
        """Every entry encdec train writes here (none may be a symlink: it would write outside the run)."""
        return (self.config, self.metrics, self.curves, self.summary, self.tensorboard, self.eval_dir, self.checkpoints)

    def check_files(self) -> None:
        check_not_symlink(*self.written())

    def is_run(self) -> bool:
        """True where encdec train has saved a checkpoint."""
        return (self.checkpoints / "latest").is_file()

    def made_by_encdec(self) -> bool:
        """True for a directory encdec train made: its marker, or (a run from before the marker) a latest pointer."""
        return self.marker.is_file() or self.is_run()

    def check_out(self) -> None:
        """Refuse to train here unless this is a new or empty directory (a lock aside) or a run encdec made;
        checked before anything is written, so a refused directory stays as it was."""
        self.check_files()
        refuse_unsafe_output(self.path)
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--out {self.path} is a file, not a run directory")
        if not self.path.is_dir() or self.made_by_encdec():
            return
        others = sorted(p.name for p in self.path.iterdir() if p.name != self.lock.name)
        if others:
            more = f" and {len(others) - 1} more" if len(others) > 1 else ""
            raise ConfigError(
                f"--out {self.path} holds {others[0]!r}{more} but is not a run directory of encdec train; "
                "choose a new or empty directory"
            )

    def mark(self) -> None:
        """Write the marker that makes this directory recognisable as a run of encdec train."""
        if not self.marker.is_file():
            write_atomic(self.marker, "a run directory of encdec train\n")

    def step_dirs(self) -> list[Path]:
        """The real step_XXXXXXXX directories of checkpoints/, oldest first."""
        if not self.checkpoints.is_dir():
            return []
        found = [p for p in self.checkpoints.iterdir() if STEP_NAME.fullmatch(p.name) and p.is_dir()]
        return sorted((p for p in found if not p.is_symlink()), key=lambda p: int(p.name[5:]))

    def pointer(self, name: str) -> str | None:
        """The checkpoint name pointer `name` ("latest", "best") holds, None without one; a pointer holds
        a `step_XXXXXXXX` name, never a path, and anything else is refused."""
        check_not_symlink(self.checkpoints)
        path = inside(self.checkpoints, name, "checkpoint pointer")
        if not path.is_file():
            return None
        target = path.read_text().strip()
        if not STEP_NAME.fullmatch(target):
            raise CheckpointError(
                f"checkpoint pointer {path} holds {target[:80]!r}, not a step_XXXXXXXX name; fix or delete it"
            )
        return target

    def step_dir(self, name: str) -> CheckpointDir:
        """Checkpoint directory `name`, refused if it leads outside checkpoints/."""
        return CheckpointDir(inside(self.checkpoints, name, "checkpoint"))

    def latest(self) -> CheckpointDir | None:
        name = self.pointer("latest")
        return self.step_dir(name) if name else None

    def checkpoint(self, which: str = "best") -> CheckpointDir:
        """Checkpoint `which`: "best" (the latest where no best was kept), "latest", a step directory name,
        or the name of one encdec average wrote (avg5_step_00001000, ema_step_00001000)."""
        return self.chosen(which)[0]

    def chosen(self, which: str = "best") -> tuple[CheckpointDir, str]:
        """Checkpoint `which` (as `checkpoint`) and why it is that one, in words a command says."""
        best = self.pointer(which) if which == "best" else None
        if best is not None:
            return self.step_dir(best), "the run's best"
        if which in ("best", "latest") and (latest := self.pointer("latest")) is not None:
            why = "the latest: the run has kept no best (no evaluation yet)" if which == "best" else "the latest"
            return self.step_dir(latest), why
        named = STEP_NAME.fullmatch(which) or MADE_NAME.fullmatch(which)
        if named and (self.checkpoints / which).is_dir():
            return self.step_dir(which), "as named"
        raise CheckpointError(f"{self.path} has no checkpoint {which!r}; is it a run directory of encdec train?")
