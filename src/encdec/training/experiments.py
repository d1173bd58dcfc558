"""Side-by-side experiments: train several configs on the same data, seed and budget,
then one Markdown table in the seeds' form and one plot of all curves.

An experiment file names a base config, overrides shared by every run, the runs
(each a set of overrides), and optionally several seeds:

    base: ../tiny.yaml            # relative to this file
    set: {training.steps: 300}    # every run
    seeds: [1, 2, 3]              # each run once per seed; the table shows mean and spread
    runs:
      t5:    {model.preset: t5-tiny}
      +rope: {model.preset: rot5-tiny, model.n_kv_heads: 4}

A member already trained is reused only while its saved config is the one the
experiment now asks for (up to the keys a resume may change, training/same_run.py);
one whose config changed is moved aside to `NAME.stale-N` and trained again. The plot
shows every seed: the mean of each run's curves with a band from the lowest to the
highest seed. Where a run distils from a teacher (training.distill), the table gains a
column for its distillation KL over the last evaluation interval.

Run names are plain names (no '/', not '..'), so every run stays inside --out, and
--out is a new or empty directory or an experiment's own (marked by .encdec-compare).
"""

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

from encdec.errors import ConfigError, EncdecError
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import output_dir, output_path, plain_name, refuse_unsafe_output, write_atomic
from encdec.schema import Count, Range, load_json, read, read_yaml_file, short
from encdec.training.metrics import plot_curves, read_metrics
from encdec.training.run_config import RunConfig, load_config
from encdec.training.same_run import SAFE, resumed_config
from encdec.training.trainer import TrainResult, train

log = logging.getLogger(__name__)
MARKER = ".encdec-compare"  # marks a directory as an experiment's --out
OUTPUTS = {"results.md", "results.json", "curves.png", MARKER}


class ExperimentStopped(EncdecError):
    """A signal stopped one run; the runs after it were not started."""


@dataclass
class RunSpec:
    name: str
    config: Path
    overrides: list[str]


@dataclass
class ExperimentFile:
    """An experiment file: runs that differ by a few config keys, trained and compared side by side.

    runs: {NAME: {config: FILE (else base), dotted.key: value, ...}}; set: keys every run takes; seeds: each
    run trained once per seed, `{seed}` in a value standing for it.
    """

    runs: dict[str, dict | None]
    base: str | None = None
    set: dict = field(default_factory=dict)
    seeds: list[Annotated[int, Range(0, 2**32 - 1)]] | None = None
    description: str | None = None

    def __post_init__(self):
        if not self.runs:
            raise ConfigError("runs must name at least one run")
        for name, keys in self.runs.items():
            if keys is not None and "config" in keys and not isinstance(keys["config"], str):
                raise ConfigError(f"runs.{name}.config must be a file name, got {short(keys['config'])}")


def read_experiment(path: Path, extra: list[str] = ()) -> tuple[list[RunSpec], list[int] | None]:
    if not path.is_file():
        raise ConfigError(f"experiment file {path} does not exist")
    try:
        spec = read(ExperimentFile, read_yaml_file(path))
    except ConfigError as error:
        raise ConfigError(f"experiment {path}: {error}"[:280]) from None
    base = path.parent / spec.base if spec.base is not None else None
    shared = _assignments(spec.set) + list(extra)
    runs = []
    for name, overrides in spec.runs.items():
        overrides = dict(overrides or {})
        config = path.parent / overrides.pop("config") if "config" in overrides else base
        if config is None:
            raise ConfigError(f"run {name} of experiment {path} has no config and the experiment no base")
        runs.append(RunSpec(name, config, shared + _assignments(overrides)))
    return runs, spec.seeds


def seeded(overrides: list[str], seed: int | None) -> list[str]:
    """A run's overrides for one seed: training.seed, and `{seed}` in a value replaced by it (a fine-tuning
    that starts from the pretraining run of its own seed: training.init_from: runs/pre/seed{seed})."""
    if seed is None:
        return list(overrides)
    return [value.replace("{seed}", str(seed)) for value in overrides] + [f"training.seed={seed}"]


def _assignments(values: dict) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]


def run_experiment(runs: list[RunSpec], out_dir: Path, seeds: list[int] | None = None) -> list[dict]:
    """Train every run (once per seed); finished runs in `out_dir` are reused, unfinished ones resumed."""
    check_experiment_out(out_dir, runs, seeds)
    output_dir(out_dir, "--out")
    if not (out_dir / MARKER).is_file():
        write_atomic(out_dir / MARKER, "the runs of an experiment of encdec compare\n")
    rows = []
    for run in runs:
        results = []
        for seed in seeds or [None]:
            overrides = seeded(run.overrides, seed)
            cfg = load_config(run.config, overrides)
            run_dir = out_dir / run.name / (f"seed{seed}" if seed is not None else "")
            set_aside_if_changed(run_dir, cfg)
            resume = RunDir(run_dir).made_by_encdec()  # an interrupted experiment continues (lost pointers too)
            results.append(_finished(run_dir, cfg.training.steps) or train(cfg, run_dir, resume=resume))
            if results[-1].interrupted:  # SIGINT / SIGTERM: the run saved a checkpoint; stop the whole experiment
                raise ExperimentStopped(f"stopped during run {run_dir}; the same command continues the experiment")
            log.info("%s: validation loss %.4f", run.name, results[-1].val_loss)
        rows.append(summarise(run.name, results))
    history = {row["run"]: [read_metrics(RunDir(d).metrics) for d in row["run_dirs"]] for row in rows}
    plot_curves(history, out_dir / "curves.png", title=out_dir.name)
    write_atomic(out_dir / "results.md", markdown_table(rows))
    written = [{**r, "run_dir": str(r["run_dir"]), "run_dirs": [str(d) for d in r["run_dirs"]]} for r in rows]
    write_atomic(out_dir / "results.json", json.dumps(written, indent=2))
    return rows


def check_experiment_out(out_dir: Path, runs: list[RunSpec], seeds: list[int] | None) -> None:
    """Refuse, before anything is trained, a run name or seed that is not a plain name (it would train
    outside `out_dir`) and an `out_dir` that holds anything but an experiment's runs and results."""
    for run in runs:
        plain_name(run.name, "run name", out_dir, ConfigError)
        for seed in seeds or []:
            plain_name(f"seed{seed}", "seed directory", out_dir, ConfigError)
    output_path(out_dir, "--out")
    refuse_unsafe_output(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory for the experiment's runs")
    if not out_dir.is_dir() or (out_dir / MARKER).is_file():
        return
    foreign = [p.name for p in sorted(out_dir.iterdir()) if not _experiment_entry(p)]
    if foreign:
        raise ConfigError(
            f"--out {out_dir} holds {foreign[0]!r}, which is not part of an experiment of encdec compare; "
            "choose a new or empty directory"
        )


def _experiment_entry(path: Path) -> bool:
    """Whether `path` is what an experiment (from before its marker) left: its results or a run of it."""
    if path.name in OUTPUTS:
        return True
    if not path.is_dir() or path.is_symlink():
        return False
    return RunDir(path).made_by_encdec() or any(RunDir(seed).made_by_encdec() for seed in path.glob("seed*"))


def set_aside_if_changed(run_dir: Path, cfg: RunConfig) -> Path | None:
    """Move a member trained with another config (beyond the keys a resume may change) to NAME.stale-N,
    so that it is trained again from scratch; nothing is deleted. Returns where it went."""
    saved_path = RunDir(run_dir).config
    if not saved_path.is_file() or not RunDir(run_dir).made_by_encdec():  # train refuses a foreign directory
        return None
    try:
        saved = load_config(saved_path, paths_from_file=False)
        _, changes = resumed_config(cfg, saved, accept_changes=True)
    except ConfigError:
        changes = {"config.yaml": "unreadable"}
    changed = sorted(key for key in changes if key not in SAFE)
    if not changed:
        return None
    n = 1
    while run_dir.with_name(f"{run_dir.name}.stale-{n}").exists():
        n += 1
    stale = run_dir.with_name(f"{run_dir.name}.stale-{n}")
    run_dir.rename(stale)
    log.warning(
        "%s was trained with another config (%s); moved to %s and trained again",
        run_dir,
        ", ".join(changed[:3]),
        stale.name,
    )
    return stale


Loss = Annotated[float, Range(0, 10**6)]  # the bounds lie far beyond any run's figures: past them a file is damaged


@dataclass
class SummaryFile:
    """A finished run's summary.json, as the trainer writes it (TrainResult without its history)."""

    steps: Count
    train_loss: Loss | None
    val_loss: Loss | None
    parameters: Count
    parameters_without_positions: Count
    wall_time: Annotated[float, Range(0, 10**9)]  # seconds: 31 years
    tokens_per_s: Annotated[float, Range(0, 10**12)]
    interrupted: bool = False
    early_stopped: bool = False
    out_of_time: bool = False
    eval_step: Count | None = None
    signal: int | None = None
    is_main: bool = True


def _finished(run_dir: Path, steps: int) -> TrainResult | None:
    """The result of a run already trained to `steps` (or stopped early), read back from its summary.json.
    None where it is absent, or damaged (whatever its schema refuses, or a summary of an interrupted run):
    the member is then trained again, resuming from its checkpoint, which writes the summary anew (a run
    resumed at its end evaluates once more: the same figures)."""
    run = RunDir(run_dir)
    run.check_files()  # a link where a run writes is refused, as training it again would refuse it
    for part in (run.summary, run.metrics):
        if part.exists() and not part.is_file():
            raise ConfigError(f"{part} is not a file, so the run cannot write its {part.name} there; remove it")
    if not run.summary.exists():
        return None
    try:
        summary = read(SummaryFile, load_json(run.summary, "run summary"), "summary.")
        if summary.interrupted or not summary.is_main:
            raise ConfigError("it is not a finished run's")
        if not run.metrics.is_file():
            raise ConfigError(f"its {run.metrics.name} is missing")
    except ConfigError as error:
        log.warning(
            "%s is damaged (%s); training that member again, from its checkpoint", run.summary, str(error)[:160]
        )
        return None
    if summary.steps < steps and not summary.early_stopped:
        return None
    return TrainResult(run_dir=run_dir, **asdict(summary), history=read_metrics(run.metrics))


def mean_spread(values: list[float | None]) -> tuple[float, float] | None:
    """The mean and sample standard deviation of the values given (None: no value). Plain float arithmetic,
    which overflows to inf rather than raising (fmean's fsum raises on 1e308 + 1e308)."""
    values = [float(v) for v in values if v is not None]
    if not values:
        return None
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) * (v - mean) for v in values) / (len(values) - 1))


def summarise(name: str, results: list[TrainResult]) -> dict:
    first = results[0]
    kl = [last_interval_mean(r.history, "distill_kl") for r in results]
    return {
        "run": name,
        "seeds": len(results),
        "train_loss": mean_spread([r.train_loss for r in results]),
        "val_loss": mean_spread([r.val_loss for r in results]),
        "seed_train_losses": [r.train_loss for r in results],  # per seed, in the experiment's seed order
        "seed_val_losses": [r.val_loss for r in results],
        "distill_kl": mean_spread(kl),
        "parameters": first.parameters,
        "parameters_without_positions": first.parameters_without_positions,
        "wall_time": mean_spread([r.wall_time for r in results])[0],
        "tokens_per_s": mean_spread([r.tokens_per_s for r in results])[0],
        "run_dir": first.run_dir,
        "run_dirs": [r.run_dir for r in results],
    }


def last_interval_mean(history: list[dict], name: str) -> float | None:
    """The mean of the train records' `name` since the last-but-one evaluation (the steps the final train
    loss closes); None where no record carries it."""
    evals = [r["step"] for r in history if r.get("kind") == "eval"]
    since = evals[-2] if len(evals) > 1 else 0
    values = [r[name] for r in history if r.get("kind") == "train" and r["step"] > since and name in r]
    spread = mean_spread(values)
    return spread[0] if spread else None


def markdown_table(rows: list[dict]) -> str:
    def loss(figures: tuple[float, float] | None, seeds: int) -> str:
        if figures is None:
            return "-"
        mean, spread = figures
        return f"{mean:.4f} ± {spread:.4f}" if seeds > 1 else f"{mean:.4f}"

    kl = any(r.get("distill_kl") is not None for r in rows)  # a column only where a run distils
    lines = [
        f"| run | train loss | val loss |{' distill KL |' if kl else ''} params | params w/o pos | wall time (s) "
        "| tokens/s |",
        f"| --- | --- | --- |{' --- |' if kl else ''} --- | --- | --- | --- |",
    ]
    for r in rows:
        kl_cell = f" {loss(r.get('distill_kl'), r['seeds'])} |" if kl else ""
        lines.append(
            f"| {r['run']} | {loss(r['train_loss'], r['seeds'])} | {loss(r['val_loss'], r['seeds'])} |{kl_cell}"
            f" {r['parameters']:,} | {r['parameters_without_positions']:,} | {r['wall_time']:.1f} "
            f"| {r['tokens_per_s']:,.0f} |"
        )
    return "\n".join(lines) + "\n"
