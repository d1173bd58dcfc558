"""The tables of docs/experiments.md: each run of an experiment against a reference run, paired by seed.

    python docs/scripts/paired.py runs/experiments/seed001_cpu/results.json --against baseline
    python docs/scripts/paired.py results.json --against ar_2+2 --pair parallel_3_2:parallel_3_3

Prints one Markdown row per run: parameters, train and validation loss (mean +/- sd over seeds), the
validation difference to the reference run paired by seed (both runs of a pair saw the same batches)
with its sd, and a verdict from a paired t-test at 5% two-sided: "lower" or "higher" where
|mean| > t(0.975, n - 1) x sd / sqrt(n), else "within noise". With 3 seeds t(0.975, 2) = 4.303, so a
difference must exceed about 2.5 sds of the paired differences. `--pair A:B` adds the row "A - B" for
two runs that are not the reference.
"""

import argparse
import json
import math
import statistics
from pathlib import Path

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def paired(a: list[float], b: list[float]) -> tuple[float, float, str]:
    """(mean, sd, verdict) of a - b by seed."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, float("nan"), "one seed"
    sd = statistics.stdev(diffs)
    bound = T_975[len(diffs) - 1] * sd / math.sqrt(len(diffs))
    verdict = "within noise" if abs(mean) <= bound else ("lower" if mean < 0 else "higher")
    return mean, sd, verdict


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else 0:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="an experiment's results.json (encdec compare)")
    parser.add_argument("--against", required=True, help="the reference run")
    parser.add_argument("--pair", action="append", default=[], help="A:B, a further paired row A - B")
    args = parser.parse_args()
    rows = {row["run"]: row for row in json.loads(args.results.read_text())}
    if args.against not in rows:
        parser.error(f"--against {args.against!r} is not a run of {args.results}; runs: {', '.join(rows)}")
    reference = rows[args.against]["seed_val_losses"]
    print(f"| run | params (w/o pos) | train loss | val loss | val − {args.against}, paired | verdict |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, row in rows.items():
        mean, sd, verdict = paired(row["seed_val_losses"], reference)
        verdict = "" if name == args.against else verdict
        print(
            f"| {name} | {row['parameters_without_positions']:,} | {spread(row['seed_train_losses'])} | "
            f"{spread(row['seed_val_losses'])} | {mean:+.3f} ± {sd:.3f} | {verdict} |"
        )
    for pair in args.pair:
        a, _, b = pair.partition(":")
        mean, sd, verdict = paired(rows[a]["seed_val_losses"], rows[b]["seed_val_losses"])
        print(f"| {a} − {b} | | | | {mean:+.3f} ± {sd:.3f} | {verdict} |")


if __name__ == "__main__":
    main()
