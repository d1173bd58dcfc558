"""Evaluation results as JSON and as a Markdown table, with sample outputs beside their references.

`encdec evaluate` computes loss, perplexity, generated outputs and their trivial baselines
(scoring.py, baselines.py), then calls `write_report` (eval.json, eval.md) and
`write_predictions` (predictions.jsonl: one record per input, its source, reference and
prediction). A reference is a text, or a list of texts where an input has several.
"""

import json
import math
from pathlib import Path

from encdec.safe_paths import output_dir, write_atomic


def perplexity(mean_loss: float) -> float:
    """exp of the mean per-token cross-entropy (nats); inf when it overflows."""
    return math.exp(mean_loss) if mean_loss < 700 else math.inf


SCALE = (
    "Scores are 0-100, higher is better; TER, WER and CER (edit rates), loss and perplexity, lower. The trivial "
    "baseline is a uniform guess over the vocabulary for the loss and perplexities, and for the generated scores each "
    "input's first sentence copied as the output (source-reference pairs) or an empty transcript (recordings): a "
    "model that has learned something beats it."
)


def markdown_table(scores: dict[str, float], baseline: dict[str, float] | None = None) -> str:
    """One row per metric: | metric | value |, and | trivial baseline | where a `baseline` is given."""
    header = ["metric", "value"] + (["trivial baseline"] if baseline is not None else [])
    rows = [header, ["---"] + ["---:"] * (len(header) - 1)]
    for name, value in scores.items():
        row = [name, f"{value:.4f}"]
        if baseline is not None:
            row.append(f"{baseline[name]:.4f}" if name in baseline else "")
        rows.append(row)
    return "\n".join(f"| {' | '.join(row)} |" for row in rows)


def cell(text: str | list[str], width: int = 200) -> str:
    """`text` on one line for a table cell, cut in its middle to `width` characters: its start and its
    end show (an output continues its input's end). Several references are joined by " / "."""
    text = text if isinstance(text, str) else " / ".join(text)
    text = " ".join(text.split()).replace("|", "\\|")
    if len(text) <= width:
        return text
    half = (width - len(" [...] ")) // 2
    return f"{text[:half].rstrip()} [...] {text[-half:].lstrip()}"


def samples_table(inputs: list[str], predictions: list[str], references: list, limit: int = 5) -> str:
    """The first `limit` examples: | input | output | reference |, cells cut in their middle to 200 characters."""
    rows = [f"| {cell(i)} | {cell(p)} | {cell(r)} |" for i, p, r in list(zip(inputs, predictions, references))[:limit]]
    return "\n".join(["| input | output | reference |", "| --- | --- | --- |", *rows])


def write_report(
    directory: Path,
    scores: dict[str, float],
    inputs: list[str],
    predictions: list[str],
    references: list,
    baseline: dict[str, float] | None = None,
    about: dict | None = None,
    notes: list[str] = (),
) -> tuple[Path, Path]:
    """Write eval.json (scores, their baseline, `about` (what was scored: files, counts) and every sample)
    and eval.md (the two tables, with a baseline the sentence that reads it, and `notes`, one line each);
    return their paths."""
    output_dir(directory, "the report directory")
    samples = [dict(input=i, output=p, reference=r) for i, p, r in zip(inputs, predictions, references)]
    json_path, md_path = directory / "eval.json", directory / "eval.md"
    record = {"scores": scores, **({"baseline": baseline} if baseline else {}), **({"data": about} if about else {})}
    write_atomic(json_path, json.dumps(record | {"samples": samples}, indent=2, ensure_ascii=False) + "\n")
    scale = f"\n{SCALE}\n" if baseline else ""
    lines = "".join(f"\n{line}\n" for line in notes)
    table = f"\n## Samples\n\n{samples_table(inputs, predictions, references)}\n" if samples else ""
    write_atomic(md_path, f"# Evaluation\n\n{markdown_table(scores, baseline)}\n{scale}{lines}{table}")
    return json_path, md_path


def write_predictions(
    path: Path, inputs: list[str], predictions: list[str], references: list, pairs: list[list[int]] | None = None
) -> Path:
    """One JSON line per input: {"source", "reference", "prediction"} (a list of references where it has several)
    and, for a test file's pairs, "pairs": the places in the file (from 0) of the pairs it was made from, which
    line up with the file's references where one input has several."""
    records = (
        json.dumps(dict(source=i, reference=r, prediction=p, **({"pairs": n} if n else {})), ensure_ascii=False)
        for i, p, r, n in zip(inputs, predictions, references, pairs or [None] * len(inputs))
    )
    # JSON allows U+2028/9 raw; JavaScript and str.splitlines do not
    text = "".join(line.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") + "\n" for line in records)
    output_dir(path.parent, "the predictions' directory")
    return write_atomic(path, text)
