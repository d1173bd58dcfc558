"""Each pair's log-probability of its given target, teacher-forced: what `encdec score` and POST /score answer.

    opened = open_model("runs/multi30k")                            # encdec.runs.open
    scores = score_pairs(opened, [("Ein Hund.", "A dog.")], ScoreOptions("mean"))
    scores[0].total, scores[0].token_logprobs, scores[0].score      # nats; the score normalised

A pair is encoded as `encdec evaluate` encodes it for its loss (likelihood.pair_examples: the source as
generation cuts it, the target as training tokenised it, EOS last) and pairs are batched as it batches them
(sorted by length, padded, one forward a batch, fewer rows where the logits would be too many): a token's
log-probability is its logit less the logsumexp of its position's logits. So the mean of -token_logprob
over every token of every pair is the model's own loss on those pairs (its cross-entropy without label
smoothing), which the tests check against the model's forward with labels.

Normalisations (`ScoreOptions.normalise`, declared once; the CLI's --normalise and the server's
parameters.normalise read this declaration):
    sum    the total log-probability of the target's L tokens
    mean   total / L, the log-probability per token
    gnmt   total / ((5 + L) / 6) ** alpha, GNMT's length penalty (Wu et al. 2016, section 7), alpha 0.6 unless given

Shapes: B pairs in a batch, T target length, V vocabulary.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import nn

from encdec.data.batch import IGNORE_INDEX, Batch
from encdec.errors import ConfigError, DataError
from encdec.evaluation.encoding import TextEncoding, opened_encoding
from encdec.evaluation.likelihood import MAX_LOGITS, batch_indices, collate, pair_examples
from encdec.generation.interface import model_device
from encdec.schema import Range, check

NORMALISATIONS = ("sum", "mean", "gnmt")
GNMT_ALPHA = 0.6  # Wu et al. 2016's tuned value
MAX_ALPHA = 10.0  # ((5 + L) / 6) ** 10 at L = 1M tokens is 1e52: still a float


@dataclass(frozen=True)
class ScoreOptions:
    """How a pair's score is made from its tokens' log-probabilities (see the module's docstring)."""

    normalise: Literal[NORMALISATIONS] = "mean"
    alpha: Annotated[float, Range(0, MAX_ALPHA)] | None = None  # gnmt's exponent; None: GNMT_ALPHA

    def __post_init__(self):
        check(self)  # built in Python: the fields' rules, as read() applies them to a request's or a flag's
        if self.alpha is not None and self.normalise != "gnmt":
            raise ConfigError(f"alpha is the exponent of gnmt's length penalty; normalise {self.normalise} has none")

    def score(self, total: float, tokens: int) -> float:
        if self.normalise == "sum":
            return total
        if self.normalise == "mean":
            return total / max(tokens, 1)  # a target cut to nothing scores 0
        alpha = GNMT_ALPHA if self.alpha is None else self.alpha
        return total / ((5 + tokens) / 6) ** alpha


@dataclass
class PairScore:
    """One pair's target under the model: its token ids (EOS last), each one's log-probability (nats), their sum,
    the normalised score, and whether the target was cut to the model's positions (then the scores are its
    prefix's)."""

    token_ids: list[int]
    token_logprobs: list[float]
    total: float
    score: float
    cut: bool = False

    def record(self, tokens: list[str]) -> dict:
        """The score as `encdec score` and POST /score write it, with its tokens' strings `tokens`."""
        values = (self.token_ids, self.token_logprobs, self.total, self.score, self.cut)
        return {"tokens": tokens, **dict(zip(("token_ids", "token_logprobs", "total", "score", "cut"), values))}


@torch.no_grad()
def pair_scores(
    model: nn.Module,
    encoding: TextEncoding,
    pairs: list[tuple[str, str]],
    options: ScoreOptions = ScoreOptions(),
    batch_size: int = 32,
    device: torch.device | None = None,
    run: Callable[[Callable[[], torch.Tensor]], torch.Tensor] = lambda forward: forward(),
) -> list[PairScore]:
    """The score of each (source, target) pair's target given its source, in the pairs' order, computed on
    `device` (default: the model's) `batch_size` pairs at a time, each batch's forward called through `run` (a
    server's runs it between two decoding steps: Scheduler.exclusive). A pair whose logits alone would pass
    MAX_LOGITS is one sentence (DataError), before any forward."""
    model.eval()
    device = model_device(model) if device is None else device
    examples, cut = pair_examples(model, encoding, pairs)
    vocab = model.config.vocab_size
    for number, (_, target) in enumerate(examples):
        if len(target) * vocab > MAX_LOGITS:
            raise DataError(
                f"pair {number}'s target holds {len(target):,} tokens, whose logits over {vocab:,} tokens pass the "
                f"{MAX_LOGITS:,} one forward holds; score a shorter target"
            )
    make = collate(model, encoding.decoder_start)
    scores: list[PairScore | None] = [None] * len(examples)
    for group in batch_indices(examples, batch_size, vocab):
        batch = make([examples[i] for i in group]).to(device)
        labelled = batch.labels != IGNORE_INDEX  # (B, T)
        logprobs = run(lambda: token_logprobs(model, batch))  # (B, T)
        for i, row, keep, labels in zip(group, logprobs.cpu(), labelled.cpu(), batch.labels.cpu()):  # one copy
            values = row[keep].tolist()
            total = sum(values)
            scores[i] = PairScore(labels[keep].tolist(), values, total, options.score(total, len(values)), cut[i])
    return scores


@torch.no_grad()
def token_logprobs(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The log-probability (B, T) of each label of `batch` under teacher forcing, 0 where it has none."""
    logits = model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask).logits.float()  # (B, T, V)
    chosen = logits.gather(-1, batch.labels.clamp(min=0)[..., None])[..., 0]  # (B, T)
    return (chosen - logits.logsumexp(-1)).masked_fill(batch.labels == IGNORE_INDEX, 0.0)


def score_pairs(
    opened,
    pairs: list[tuple[str, str]],
    options: ScoreOptions = ScoreOptions(),
    batch_size: int = 32,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    run: Callable[[Callable[[], torch.Tensor]], torch.Tensor] = lambda forward: forward(),
) -> list[PairScore]:
    """`pair_scores` of a model opened by encdec.runs.open.open_model, through its own text encoding (a run's
    templates, or its Hugging Face tokenizer's), sources in `src_lang` and targets in `tgt_lang` where given."""
    encoding = opened_encoding(opened, src_lang, tgt_lang)
    return pair_scores(opened.model, encoding, pairs, options, batch_size, run=run)
