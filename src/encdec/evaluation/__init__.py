"""Evaluation of trained models: text metrics now; `encdec evaluate RUN_DIR` (loss, perplexity,
generated outputs scored against references) lands once the trainer's checkpoint format is final."""

from encdec.evaluation.metrics import bleu, chrf, exact_match, rot5_preprocess, rouge, score_texts, ter
from encdec.evaluation.report import markdown_table, perplexity, write_report

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
    "write_report",
]
