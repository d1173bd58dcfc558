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

TENSORBOARD_DIR = "tensorboard"


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class MetricsLog:
    """Appends records; on resume, first drops records after the checkpoint's step (in TensorBoard too)."""

    def __init__(self, path: Path, keep_through_step: int | None = None, enabled: bool = True,
                 tensorboard: bool = False):  # fmt: skip
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

            log_dir = path.parent / TENSORBOARD_DIR
            check_not_symlink(log_dir)
            purge = None if keep_through_step is None else keep_through_step + 1  # events after the checkpoint go
            self.board = SummaryWriter(str(log_dir), purge_step=purge)

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


def plot_curves(runs: dict[str, list[dict]], path: Path, title: str = "") -> Path:
    """Two panels, one colour per run. Left, the whole run: train loss per step (thin) and
    evaluated train / validation loss (markers). Right, the evaluations of the second half
    of training on their own scale, where runs that differ by a few hundredths separate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (whole, end) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    last_step = max((r["step"] for records in runs.values() for r in records), default=0)
    for i, (name, records) in enumerate(runs.items()):
        colour = f"C{i}"
        train = [(r["step"], r["loss"]) for r in records if r.get("kind") == "train"]
        evals = [r for r in records if r.get("kind") == "eval"]
        if train:
            whole.plot(*zip(*train), color=colour, alpha=0.35, linewidth=0.8)
        if not evals:
            continue
        for ax, shown in ((whole, evals), (end, [r for r in evals if r["step"] >= last_step / 2])):
            steps = [r["step"] for r in shown]
            ax.plot(steps, [r["train_loss"] for r in shown], "o--", color=colour, label=f"{name} train")
            ax.plot(steps, [r["val_loss"] for r in shown], "s-", color=colour, label=f"{name} validation")
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
