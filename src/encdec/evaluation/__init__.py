"""Evaluation of trained models: what `encdec evaluate` measures and writes.

metrics.py     ROUGE-1/2/L/Lsum, BLEU, chrF, TER, exact match (one or several references)
baselines.py   the trivial baselines a score stands beside (uniform guess, first sentence)
generated.py   outputs generated for a list of inputs, a batch at a time
files.py       a test file's format and texts (pairs or documents)
encoding.py    a model's text encoding: sources, references, documents as token ids
likelihood.py  teacher-forced NLL over every pair or document of a file
scoring.py     one evaluation (loss, generations scored, baselines) and its report files
report.py      eval.json, eval.md and predictions.jsonl
"""

from encdec.evaluation.report import markdown_table, perplexity, write_report
from encdec.evaluation.text_metrics import (
    bleu,
    cer,
    chrf,
    exact_match,
    rot5_preprocess,
    rouge,
    score_texts,
    ter,
    wer,
)

__all__ = [
    "bleu",
    "chrf",
    "exact_match",
    "markdown_table",
    "perplexity",
    "rot5_preprocess",
    "rouge",
    "score_texts",
    "ter",
    "wer",
    "cer",
    "write_report",
]
