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
highest seed.
"""

import json
import logging
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from encdec.errors import ConfigError, EncdecError
from encdec.runs.config import RunConfig, load_config
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import plot_curves, read_metrics
from encdec.training.same_run import SAFE, resumed_config
from encdec.training.trainer import TrainResult, train

log = logging.getLogger(__name__)


class ExperimentStopped(EncdecError):
    """A signal stopped one run; the runs after it were not started."""


@dataclass
class RunSpec:
    name: str
    config: Path
    overrides: list[str]


def read_experiment(path: Path, extra: list[str] = ()) -> tuple[list[RunSpec], list[int] | None]:
    try:
        spec = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        raise ConfigError(f"experiment file {path} cannot be read as YAML") from None
    unknown = set(spec) - {"base", "set", "seeds", "runs", "description"}
    if unknown:
        raise ConfigError(f"unknown key {sorted(unknown)[0]} in experiment {path}; known: base, set, seeds, runs")
    if not isinstance(spec.get("runs"), dict) or not spec["runs"]:
        raise ConfigError(f"experiment {path} needs a mapping of runs")
    base = path.parent / spec["base"] if "base" in spec else None
    shared = _assignments(spec.get("set", {})) + list(extra)
    runs = []
    for name, overrides in spec["runs"].items():
        overrides = dict(overrides or {})
        config = path.parent / overrides.pop("config") if "config" in overrides else base
        if config is None:
            raise ConfigError(f"run {name} of experiment {path} has no config and the experiment no base")
        runs.append(RunSpec(str(name), config, shared + _assignments(overrides)))
    return runs, spec.get("seeds")


def _assignments(values: dict) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]


def run_experiment(runs: list[RunSpec], out_dir: Path, seeds: list[int] | None = None) -> list[dict]:
    """Train every run (once per seed); finished runs in `out_dir` are reused, unfinished ones resumed."""
    rows = []
    for run in runs:
        results = []
        for seed in seeds or [None]:
            overrides = run.overrides + ([f"training.seed={seed}"] if seed is not None else [])
            cfg = load_config(run.config, overrides)
            run_dir = out_dir / run.name / (f"seed{seed}" if seed is not None else "")
            set_aside_if_changed(run_dir, cfg)
            resume = RunDir(run_dir).is_run()  # an interrupted experiment continues
            results.append(_finished(run_dir, cfg.training.steps) or train(cfg, run_dir, resume=resume))
            if results[-1].interrupted:  # SIGINT / SIGTERM: the run saved a checkpoint; stop the whole experiment
                raise ExperimentStopped(f"stopped during run {run_dir}; the same command continues the experiment")
            log.info("%s: validation loss %.4f", run.name, results[-1].val_loss)
        rows.append(summarise(run.name, results))
    history = {row["run"]: [read_metrics(RunDir(d).metrics) for d in row["run_dirs"]] for row in rows}
    plot_curves(history, out_dir / "curves.png", title=out_dir.name)
    (out_dir / "results.md").write_text(markdown_table(rows))
    written = [{**r, "run_dir": str(r["run_dir"]), "run_dirs": [str(d) for d in r["run_dirs"]]} for r in rows]
    (out_dir / "results.json").write_text(json.dumps(written, indent=2))
    return rows


def set_aside_if_changed(run_dir: Path, cfg: RunConfig) -> Path | None:
    """Move a member trained with another config (beyond the keys a resume may change) to NAME.stale-N,
    so that it is trained again from scratch; nothing is deleted. Returns where it went."""
    saved_path = RunDir(run_dir).config
    if not saved_path.is_file():
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


def _finished(run_dir: Path, steps: int) -> TrainResult | None:
    """The result of a run already trained to `steps`, read back from its summary.json."""
    summary_path = RunDir(run_dir).summary
    if not summary_path.exists():
        return None
    summary = json.loads(summary_path.read_text())
    if summary["steps"] < steps:
        return None
    summary["run_dir"] = run_dir
    return TrainResult(**summary, history=read_metrics(RunDir(run_dir).metrics))


def summarise(name: str, results: list[TrainResult]) -> dict:
    def stats(values: list[float | None]) -> tuple[float, float]:
        values = [v for v in values if v is not None]
        return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

    first = results[0]
    return {
        "run": name,
        "seeds": len(results),
        "train_loss": stats([r.train_loss for r in results]),
        "val_loss": stats([r.val_loss for r in results]),
        "parameters": first.parameters,
        "parameters_without_positions": first.parameters_without_positions,
        "wall_time": statistics.fmean(r.wall_time for r in results),
        "tokens_per_s": statistics.fmean(r.tokens_per_s for r in results),
        "run_dir": first.run_dir,
        "run_dirs": [r.run_dir for r in results],
    }


def markdown_table(rows: list[dict]) -> str:
    def loss(mean_spread: tuple[float, float], seeds: int) -> str:
        mean, spread = mean_spread
        return f"{mean:.4f} ± {spread:.4f}" if seeds > 1 else f"{mean:.4f}"

    lines = [
        "| run | train loss | val loss | params | params w/o pos | wall time (s) | tokens/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {loss(r['train_loss'], r['seeds'])} | {loss(r['val_loss'], r['seeds'])} "
            f"| {r['parameters']:,} | {r['parameters_without_positions']:,} | {r['wall_time']:.1f} "
            f"| {r['tokens_per_s']:,.0f} |"
        )
    return "\n".join(lines) + "\n"
