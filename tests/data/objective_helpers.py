"""Shared pieces of the objective tests: ROT5's summarization template, the inverse of span corruption and a
seq2seq objective over a tokenizer's own ids."""

import numpy as np

from encdec.data.objectives import Seq2SeqObjective

SUMMARIZATION = ("{source}\nSummary:", "{target}")  # ROT5: input = story + "\nSummary:", target = summary


def rebuild_from_corruption(inputs: np.ndarray, targets: np.ndarray, sentinel_ids: np.ndarray) -> np.ndarray:
    """Invert `span_corrupt`: put each target span back in place of its sentinel."""
    sentinel_set = set(int(s) for s in sentinel_ids)
    spans: dict[int, list[int]] = {}
    current = None
    for token in targets.tolist():
        if token in sentinel_set:
            current = token
            spans[current] = []
        elif current is not None:
            spans[current].append(token)
    out: list[int] = []
    for token in inputs.tolist():
        out.extend(spans[token] if token in sentinel_set else [token])
    return np.asarray(out, dtype=np.int64)


def seq2seq(sources, targets, batch_size: int, tok, **options) -> Seq2SeqObjective:
    """A Seq2SeqObjective over token-id `sources` and `targets` that pads, ends and starts with `tok`'s ids."""
    return Seq2SeqObjective(sources, targets, batch_size, tok.pad_id, tok.eos_id, tok.decoder_start_id, **options)
