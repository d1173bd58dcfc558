"""The DialogSum table of docs/experiments.md: each pretrained model's fine-tunings (one per seed), their
validation loss and ROUGE (`encdec evaluate RUN --samples 200 --max-new-tokens 64`), and ROUGE-L paired by
seed against the first run, with paired.py's t-test verdict.

    python docs/scripts/dialogsum_table.py runs/experiments/rot5_ablation_dialogsum_cpu
"""

import json
import statistics
import sys
from pathlib import Path

from paired import paired, spread

RUNS = ("t5", "+rope", "+rope+gqa", "+rope+gqa+moe", "+rope+gqa+moe+losses")


def main() -> None:
    out = Path(sys.argv[1])
    rows = {}
    for name in RUNS:
        seeds = sorted((out / name).glob("seed*"))
        scores = [json.loads((s / "eval" / "eval.json").read_text())["scores"] for s in seeds]
        losses = [json.loads((s / "summary.json").read_text())["val_loss"] for s in seeds]
        rows[name] = {"val": losses, **{k: [x[k] for x in scores] for k in ("rouge1", "rouge2", "rougeL")}}
    reference = rows[RUNS[0]]["rougeL"]
    print(
        f"| pretrained model | seeds | DialogSum val loss | ROUGE-1 | ROUGE-2 | ROUGE-L | ROUGE-L − {RUNS[0]}, paired | verdict |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, row in rows.items():
        mean, sd, verdict = paired(row["rougeL"], reference)
        cells = [spread(row["val"])] + [
            f"{statistics.fmean(row[k]):.2f} ± {statistics.stdev(row[k]):.2f}" for k in ("rouge1", "rouge2", "rougeL")
        ]
        verdict = (
            "" if name == RUNS[0] else verdict.replace("lower", "lower (worse)").replace("higher", "higher (better)")
        )
        print(f"| {name} | {len(row['val'])} | {' | '.join(cells)} | {mean:+.2f} ± {sd:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
