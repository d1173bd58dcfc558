"""Evaluation results as JSON and as a Markdown table, with sample outputs beside their references.

`encdec evaluate RUN_DIR` (next, once the trainer's checkpoint format is final)
computes loss, perplexity and generated outputs, then calls `write_report`.
"""

import json
import math
from pathlib import Path

from encdec.safe_paths import write_atomic


def perplexity(mean_loss: float) -> float:
    """exp of the mean per-token cross-entropy (nats); inf when it overflows."""
    return math.exp(mean_loss) if mean_loss < 700 else math.inf


def markdown_table(scores: dict[str, float]) -> str:
    """One row per metric: | metric | value |."""
    rows = [f"| {name} | {value:.4f} |" for name, value in scores.items()]
    return "\n".join(["| metric | value |", "| --- | ---: |", *rows])


def samples_table(inputs: list[str], predictions: list[str], references: list[str], limit: int = 5) -> str:
    """The first `limit` examples: | input | output | reference |, cells cut to 200 characters."""

    def cell(text: str) -> str:
        text = " ".join(text.split()).replace("|", "\\|")
        return text if len(text) <= 200 else text[:197] + "..."

    rows = [f"| {cell(i)} | {cell(p)} | {cell(r)} |" for i, p, r in list(zip(inputs, predictions, references))[:limit]]
    return "\n".join(["| input | output | reference |", "| --- | --- | --- |", *rows])


def write_report(
    directory: Path, scores: dict[str, float], inputs: list[str], predictions: list[str], references: list[str]
) -> tuple[Path, Path]:
    """Write eval.json (scores and every sample) and eval.md (the two tables); return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    samples = [dict(input=i, output=p, reference=r) for i, p, r in zip(inputs, predictions, references)]
    json_path, md_path = directory / "eval.json", directory / "eval.md"
    write_atomic(json_path, json.dumps({"scores": scores, "samples": samples}, indent=2, ensure_ascii=False) + "\n")
    md = f"# Evaluation\n\n{markdown_table(scores)}\n\n## Samples\n\n{samples_table(inputs, predictions, references)}\n"
    write_atomic(md_path, md)
    return json_path, md_path
