"""The passkey recipe's accuracy by depth and length (docs/recipes.md): the test file `encdec data passkey`
wrote (its "length" and "depth" of each example) beside `encdec evaluate`'s predictions.jsonl of it, as a
markdown table (a row a depth, a column a length, exact matches in percent; a last row counting a key whose
characters all came out, in any order) and a heatmap.

    python docs/scripts/passkey_depth.py passkey_test.jsonl runs/passkey/eval/predictions.jsonl \
        --plot docs/img/passkey_depth.png
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path


def nominal(length: int, lengths: list[int]) -> int:
    """The asked length an example's measured one (a few tokens short, cut at a sentence end) belongs to."""
    return min(lengths, key=lambda asked: abs(asked - length))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("test", type=Path, help="the jsonl file of `encdec data passkey`")
    parser.add_argument("predictions", type=Path, help="`encdec evaluate`'s predictions.jsonl of it")
    parser.add_argument("--lengths", required=True, help="the lengths asked of `encdec data passkey`, comma-separated")
    parser.add_argument("--plot", type=Path, help="a heatmap PNG to write")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    examples = [json.loads(line) for line in args.test.read_text().splitlines() if line.strip()]
    predictions = [json.loads(line) for line in args.predictions.read_text().splitlines() if line.strip()]
    hits, found = defaultdict(list), defaultdict(list)  # exact; the key's characters in any order
    for row, predicted in enumerate(predictions):
        for place in predicted.get("pairs", [row]):
            example = examples[place]
            depth = round(example["depth"], 1)  # the depth asked, to its tenth (the sentence end nearest it)
            guess = predicted["prediction"].strip()
            hits[depth, nominal(example["length"], lengths)].append(guess == example["target"])
            found[nominal(example["length"], lengths)].append(sorted(guess) == sorted(example["target"]))
    depths = sorted({depth for depth, _ in hits})
    table = {key: 100 * sum(v) / len(v) for key, v in hits.items()}
    print("| depth | " + " | ".join(f"{n:,} tokens" for n in lengths) + " |")
    print("| ---: | " + " | ".join("---:" for _ in lengths) + " |")
    for depth in depths:
        print(f"| {depth:.0%} | " + " | ".join(f"{table.get((depth, n), float('nan')):.0f}" for n in lengths) + " |")
    overall = [100 * sum(sum(hits[d, n]) for d in depths) / sum(len(hits[d, n]) for d in depths) for n in lengths]
    print("| all | " + " | ".join(f"**{x:.1f}**" for x in overall) + " |")
    print("| any order | " + " | ".join(f"{100 * sum(found[n]) / len(found[n]):.1f}" for n in lengths) + " |")
    print(f"\n{sum(map(len, hits.values()))} examples, {len(hits[depths[0], lengths[0]])} a cell")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        grid = [[table.get((d, n), float("nan")) for n in lengths] for d in depths]
        fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(lengths), 0.45 * len(depths) + 1.4))
        image = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
        ax.set_xticks(range(len(lengths)), [f"{n:,}" for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=8)
        ax.set_xlabel("source length (tokens)")
        ax.set_ylabel("depth of the pass key")
        ax.set_title("passkey retrieval: exact matches (%)")
        fig.colorbar(image, ax=ax)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
