"""metrics.jsonl: one JSON line per optimizer step and per evaluation; a TensorBoard log; the curves as a PNG.

With the `tensorboard` package installed (`pip install 'encdec[tensorboard]'`), every
number of every record also goes to RUN_DIR/tensorboard as `train/loss`,
`eval/val_loss`, ... at its step, so `tensorboard --logdir runs/` shows runs side by
side while they train.
"""

import importlib.util
import json
from pathlib import Path

from encdec.safe_paths import check_not_symlink


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class MetricsLog:
    """Appends records; on resume, first drops records after the checkpoint's step (in TensorBoard too)."""

    def __init__(
        self, path: Path, keep_through_step: int | None = None, enabled: bool = True, tensorboard: Path | None = None
    ):
        """Records go to `path` and, when `tensorboard` names a directory, to TensorBoard events there."""
        self.path = path
        self.enabled = enabled
        self.board = None
        if not enabled:
            return
        check_not_symlink(path)  # a symlink would rewrite a file outside the run directory
        if keep_through_step is None:
            path.write_text("")
        elif path.exists():
            kept = [line for line in read_metrics(path) if line["step"] <= keep_through_step]
            path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            check_not_symlink(tensorboard)
            purge = None if keep_through_step is None else keep_through_step + 1  # events after the checkpoint go
            self.board = SummaryWriter(str(tensorboard), purge_step=purge)

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.board is not None and record.get("kind") in ("train", "eval"):
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
                    self.board.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def close(self) -> None:
        if self.board is not None:
            self.board.close()


def read_metrics(path: Path) -> list[dict]:
    records = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill mid-write
                break
    return records


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
        if not evals["val_loss"]:
            continue
        for ax, first in ((whole, 0), (end, last_step / 2)):
            for key, marker, kind in (("train_loss", "o--", "train"), ("val_loss", "s-", "validation")):
                steps, mean, low, high = (list(v) for v in zip(*(row for row in zip(*evals[key]) if row[0] >= first)))
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
    whole.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def extra_panels(seeds_of: dict[str, list[list[dict]]]) -> list[tuple[str, str]]:
    """(kind, key) of the panels beyond the losses: the generated metric evaluations scored, the gradient norm."""
    keys = {(r.get("kind"), k) for seeds in seeds_of.values() for rs in seeds for r in rs for k in r}
    scored = [("eval", f"val_{m}") for m in ("rougeL", "bleu", "chrf") if ("eval", f"val_{m}") in keys]
    return scored[:1] + ([("train", "grad_norm")] if ("train", "grad_norm") in keys else [])


def across_seeds(seeds: list[list[dict]], kind: str, key: str) -> tuple[list, list, list, list] | None:
    """(steps, mean, lowest, highest) of `key` over the seeds' records of `kind`, at the steps every seed has."""
    series = [{r["step"]: r[key] for r in records if r.get("kind") == kind and key in r} for records in seeds]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    if not steps:
        return None
    values = [[s[step] for s in series] for step in steps]
    return steps, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]
