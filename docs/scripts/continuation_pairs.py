"""Prefix-conditional test pairs from a text: the text as one running stream of words, cut into consecutive
windows of SOURCE + TARGET words, each window a jsonl pair {"source": its first SOURCE words, "target": the rest}.

    python docs/scripts/continuation_pairs.py ../shared/data/tinystories/tinystories_valid_head.txt.gz \
        runs/experiments/adapt_eval/valid_pairs.jsonl --source-words 64 --target-words 32

`encdec evaluate RUN --data PAIRS` then scores every model on the same text: the loss per target token given
its source, an encoder-decoder reading the source in its encoder, a decoder-only model reading source and target
as one stream (encdec.evaluation.likelihood). Issue 47's experiment scores its runs so.
"""

import argparse
import gzip
import json
from pathlib import Path


def pairs(text: str, source_words: int, target_words: int) -> list[dict[str, str]]:
    words = text.replace("<|endoftext|>", " ").split()
    size = source_words + target_words
    return [
        {"source": " ".join(words[i : i + source_words]), "target": " ".join(words[i + source_words : i + size])}
        for i in range(0, len(words) - size + 1, size)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("text", type=Path, help="a text file, or .gz")
    parser.add_argument("out", type=Path, help="the jsonl pairs to write (a new file)")
    parser.add_argument("--source-words", type=int, default=64)
    parser.add_argument("--target-words", type=int, default=32)
    args = parser.parse_args()
    if args.source_words < 1 or args.target_words < 1:
        parser.error("--source-words and --target-words must be positive")
    if args.out.exists():
        parser.error(f"{args.out} exists; choose a new file")
    opener = gzip.open if args.text.suffix == ".gz" else open
    with opener(args.text, "rt", encoding="utf-8") as f:
        rows = pairs(f.read(), args.source_words, args.target_words)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"{len(rows)} pairs of {args.source_words} + {args.target_words} words written to {args.out}")


if __name__ == "__main__":
    main()
