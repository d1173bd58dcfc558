"""Trivial baselines that put a score on a scale: what a model must beat before it has learned anything.

Generated outputs are scored against copying each input's first sentence (lead-1): the
usual floor for summarization (a news article's lead is a strong summary), and for
translation of single sentences the source copied unchanged. A loss is set against a
uniform guess over the vocabulary: loss ln V, perplexity V.
"""

import math
import re

from encdec.evaluation.text_metrics import score_texts

# a full stop after these words (lowercased, without the stop) ends no sentence
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "mt"})
SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+")


def first_sentence(text: str) -> str:
    """The first line's first sentence: up to the first ., ! or ? (with any closing quote) before
    white space that ends no abbreviation or initial; the whole line where there is none."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    for end in SENTENCE_END.finditer(line):
        word = line[: end.start()].rsplit(maxsplit=1)[-1].lower().lstrip("\"'(")
        if word in ABBREVIATIONS or len(word) == 1:
            continue
        return line[: end.end()].strip()
    return line


def lead_scores(inputs: list[str], references: list[str], rot5_preprocessing: bool = False) -> dict[str, float]:
    """score_texts of each input's first sentence, copied as its output."""
    return score_texts([first_sentence(text) for text in inputs], references, rot5_preprocessing)


def uniform_loss(vocab_size: int) -> dict[str, float]:
    """The loss and perplexity of a uniform guess over `vocab_size` tokens."""
    return {"val_loss": math.log(vocab_size), "val_perplexity": float(vocab_size)}
