"""Seed 000's embedding loss against the gains of its two layer norms, over a run's checkpoints (docs/experiments.md).

Run: encdec train configs/seeds/cpu/000_mse_embedding_loss.yaml --out runs/drift --set training.seed=1 \\
         --set output.save_interval=50 --set output.keep_last=20
     python docs/scripts/embedding_drift.py runs/drift docs/img/seed000_embedding_drift.png

Prints, per checkpoint, the embedding loss (mean of the 10 steps up to it), the mean gains of the layer norms
the loss compares (of the averaged embeddings, of the encoder output) and the loss over the product of their
RMS gains: what the loss would be without the gains shrinking.
"""

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from safetensors.torch import load_file  # noqa: E402


def main(run: Path, out: Path) -> None:
    records = [json.loads(line) for line in open(run / "metrics.jsonl")]
    loss = {r["step"]: r["embedding_loss"] for r in records if r["kind"] == "train" and "embedding_loss" in r}
    rows = []
    for checkpoint in sorted((run / "checkpoints").glob("step_*")):
        step = int(checkpoint.name.split("_")[1])
        weights = load_file(checkpoint / "model.safetensors")
        gains = [weights[f"embedding_loss.{name}_norm.weight"] for name in ("embedding", "encoder")]
        mean = statistics.mean(loss[s] for s in range(max(1, step - 9), step + 1))
        rms = [float(g.pow(2).mean().sqrt()) for g in gains]
        rows.append((step, mean, float(gains[0].mean()), float(gains[1].mean()), mean / (rms[0] * rms[1])))
        print(
            f"step {step}: embedding loss {mean:.4f}, gains {rows[-1][2]:.3f} / {rows[-1][3]:.3f}, "
            f"loss / gains {rows[-1][4]:.4f}"
        )
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = sorted(loss)
    axes[0].plot(steps, [loss[s] for s in steps], lw=0.6, alpha=0.5, label="embedding loss (each step)")
    axes[0].plot([r[0] for r in rows], [r[4] for r in rows], "o-", label="loss / (RMS gain x RMS gain)")
    axes[0].set_xlabel("step"), axes[0].legend(), axes[0].set_title("embedding loss (MSE)")
    axes[1].plot([r[0] for r in rows], [r[2] for r in rows], "o-", label="gain: averaged embeddings' norm")
    axes[1].plot([r[0] for r in rows], [r[3] for r in rows], "o-", label="gain: encoder output's norm")
    axes[1].set_xlabel("step"), axes[1].legend(), axes[1].set_title("layer-norm gains (mean)")
    figure.tight_layout()
    figure.savefig(out, dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
