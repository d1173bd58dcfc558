"""metrics.jsonl: one JSON line per optimizer step and per evaluation; a TensorBoard log; the curves as a PNG.

With the `tensorboard` package installed (`pip install 'encdec[tensorboard]'`), every
number of every record also goes to RUN_DIR/tensorboard as `train/loss`,
`eval/val_loss`, ... at its step, so `tensorboard --logdir runs/` shows runs side by
side while they train.

metrics.jsonl is written anew (a new file renamed over the old, holding the records
kept) whenever a training opens it, and appended to only through that file's own
descriptor, so a link planted at its name never carries a record elsewhere.
"""

import importlib.util
import json
import logging
import math
import typing
from dataclasses import dataclass
from pathlib import Path

from encdec.errors import ConfigError
from encdec.safe_paths import atomic_path, check_not_symlink, open_replacing
from encdec.schema import Count, value_of

log = logging.getLogger(__name__)
FLOAT32_MAX = 3.4028234663852886e38


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class MetricsLog:
    """Appends records to a file of its own; on resume, first drops records after the checkpoint's step (in
    TensorBoard too)."""

    def __init__(
        self, path: Path, keep_through_step: int | None = None, enabled: bool = True, tensorboard: Path | None = None
    ):
        """Records go to `path` and, when `tensorboard` names a directory, to TensorBoard events there."""
        self.path = path
        self.enabled = enabled
        self.board = None
        self.file = None
        if not enabled:
            return
        check_not_symlink(path)  # refused rather than replaced: the user may not know where it leads
        kept = []
        if keep_through_step is not None and path.is_file():
            kept = [r for r in read_metrics(path) if isinstance(r.get("step"), int) and r["step"] <= keep_through_step]
        self.file = open_replacing(path, "".join(json.dumps(r) + "\n" for r in kept))
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            check_not_symlink(tensorboard)
            purge = None if keep_through_step is None else keep_through_step + 1  # events after the checkpoint go
            self.board = SummaryWriter(str(tensorboard), purge_step=purge)

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record) + "\n")  # line-buffered: on the disk before the next step
        if self.board is not None and record.get("kind") in ("train", "eval"):
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
                    self.board.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.board is not None:
            self.board.close()


@dataclass
class RecordKeys:
    """The keys every metrics.jsonl record carries; its figures (loss, lr, val_loss, rougeL, ...) vary by kind."""

    kind: str
    step: Count


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl, up to a line cut by a kill mid-write. Lines that are not records
    (no kind or step as RecordKeys declares them, a figure that is not a number) go, with one warning."""
    records, dropped = [], 0
    hints = typing.get_type_hints(RecordKeys, include_extras=True)
    for line in Path(path).read_text(encoding="utf-8", errors="replace").split("\n"):
        if line.strip():
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):  # a line cut by a kill mid-write
                break
            try:
                if not isinstance(record, dict):
                    raise ConfigError("not a record")
                for key, hint in hints.items():
                    value_of(hint, record.get(key), key)
                figures = (v for k, v in record.items() if k not in ("kind", "changes"))  # changes: config_change's
                if not all(is_figure(v) for v in figures):
                    raise ConfigError("a figure is not a number")
            except ConfigError:
                dropped += 1
                continue
            records.append(record)
    if dropped:
        log.warning("%s: %d lines are not metrics records; they are left out", path, dropped)
    return records


def is_figure(value: object) -> bool:
    """A record's figure: None, nan or inf (the trainer writes them: nothing scored, an overflowed gradient), or
    a number within float32's range, which every figure a run computes stays in (matplotlib cannot scale 1e308)."""
    if isinstance(value, float) and not math.isfinite(value):
        return True
    return value is None or (isinstance(value, (int, float)) and abs(value) <= FLOAT32_MAX)


def plot_curves(runs: dict[str, list[dict] | list[list[dict]]], path: Path, title: str = "") -> Path:
    """Panels, one colour per run. First, the whole run: train loss per step (thin) and
    evaluated train / validation loss (markers). Second, the evaluations of the second half
    of training on their own scale, where runs that differ by a few hundredths separate.
    Then, where the records have them, the generated metric (ROUGE-L, else BLEU, else
    chrF) at each evaluation and the gradient norm per step.

    A run given as several seeds' records (a list of lists) is drawn as the seeds' mean,
    with a band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds_of = {
        name: records if records and isinstance(records[0], list) else [records] for name, records in runs.items()
    }
    extra = extra_panels(seeds_of)
    fig, axes = plt.subplots(
        1, 2 + len(extra), figsize=(13 + 4 * len(extra), 5), gridspec_kw={"width_ratios": [3, 2] + [2] * len(extra)}
    )
    whole, end = axes[0], axes[1]
    last_step = max((r["step"] for seeds in seeds_of.values() for rs in seeds for r in rs), default=0)
    for i, (name, seeds) in enumerate(seeds_of.items()):
        colour = f"C{i}"
        label = f"{name} (mean of {len(seeds)} seeds)" if len(seeds) > 1 else name
        train = across_seeds(seeds, "train", "loss")
        if train:
            whole.plot(train[0], train[1], color=colour, alpha=0.35, linewidth=0.8)
        evals = {key: across_seeds(seeds, "eval", key) for key in ("train_loss", "val_loss")}
        for ax, first in ((whole, 0), (end, last_step / 2)):
            for key, marker, kind in (("train_loss", "o--", "train"), ("val_loss", "s-", "validation")):
                rows = [row for row in zip(*evals[key] or ()) if row[0] >= first]
                if not rows:  # no evaluation of it (in this half)
                    continue
                steps, mean, low, high = (list(v) for v in zip(*rows))
                ax.plot(steps, mean, marker, color=colour, label=f"{label} {kind}")
                if len(seeds) > 1:
                    ax.fill_between(steps, low, high, color=colour, alpha=0.15, linewidth=0)
    for ax, (kind, key) in zip(axes[2:], extra, strict=True):
        for i, (name, seeds) in enumerate(seeds_of.items()):
            series = across_seeds(seeds, kind, key)
            if series:
                ax.plot(series[0], series[1], "o-" if kind == "eval" else "-", color=f"C{i}", label=name, linewidth=0.8)
                if len(seeds) > 1:
                    ax.fill_between(series[0], series[2], series[3], color=f"C{i}", alpha=0.15, linewidth=0)
        ax.set_title(
            f"validation {key[4:]} (generated)" if key.startswith("val_") else "gradient norm (before clipping)"
        )
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    whole.set_title(title)
    end.set_title("second half, evaluations only")
    for ax in (whole, end):
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy loss")
        ax.grid(alpha=0.3)
    if whole.get_legend_handles_labels()[0]:  # a run without evaluations has no labelled line
        whole.legend(fontsize="small")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    return path


def extra_panels(seeds_of: dict[str, list[list[dict]]]) -> list[tuple[str, str]]:
    """(kind, key) of the panels beyond the losses: the generated metric evaluations scored, the gradient norm."""
    keys = {(r.get("kind"), k) for seeds in seeds_of.values() for rs in seeds for r in rs for k in r}
    scored = [("eval", f"val_{m}") for m in ("rougeL", "bleu", "chrf") if ("eval", f"val_{m}") in keys]
    return scored[:1] + ([("train", "grad_norm")] if ("train", "grad_norm") in keys else [])


def across_seeds(seeds: list[list[dict]], kind: str, key: str) -> tuple[list, list, list, list] | None:
    """(steps, mean, lowest, highest) of `key` over the seeds' records of `kind`, at the steps every seed has."""
    series = [
        {r["step"]: r[key] for r in records if r.get("kind") == kind and r.get(key) is not None} for records in seeds
    ]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    if not steps:
        return None
    values = [[s[step] for s in series] for step in steps]
    return steps, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]
