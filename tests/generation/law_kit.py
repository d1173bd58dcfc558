"""Distribution tests of sampling (generate's speculative sampling, a server's): the exact law of the first two
tokens under plain sampling, from a model's logits, and Pearson's chi-square test of draws against it."""

import torch

from encdec.generation import GenerationConfig
from encdec.generation.logits_processors import apply_all, build_processors


def chi_square_p_value(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """Pearson's test of `counts` against `expected` (one entry per cell), the cells expecting fewer than 5
    draws pooled into one: the probability of a statistic this large under the expected law (0 where a cell the
    law excludes was drawn)."""
    impossible = expected == 0
    if counts[impossible].sum() > 0:
        return 0.0
    counts, expected = counts[~impossible], expected[~impossible]
    small = expected < 5
    if small.any():
        counts = torch.cat((counts[~small], counts[small].sum()[None]))
        expected = torch.cat((expected[~small], expected[small].sum()[None]))
    statistic = ((counts - expected) ** 2 / expected).sum()
    df = torch.tensor(counts.numel() - 1.0, dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, statistic / 2))


def two_token_law(model, src: torch.Tensor, options: dict) -> torch.Tensor:
    """(V * V,) the probability of each first two tokens under plain sampling with `options`: the processed
    distribution of the first, times that of the second given it."""
    cfg = GenerationConfig(**options)
    chain = build_processors(cfg, max_length=3)
    V = model.config.vocab_size
    state = model.start(src.repeat(V, 1), None, 2)
    start = torch.zeros(V, 1, dtype=torch.long)
    first = apply_all(chain, start, model.step(start, state)[:, -1].double()).softmax(-1)[0]  # (V,)
    seqs = torch.cat((start, torch.arange(V)[:, None]), dim=1)  # (V, 2) every first token
    second = apply_all(chain, seqs, model.step(seqs[:, 1:], state)[:, -1].double()).softmax(-1)  # (V, V)
    return (first[:, None] * second).flatten()


def two_token_counts(sequences: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(V * V,) how often each first two new tokens were drawn: sequences (N, >= 3), the start token first."""
    return torch.bincount(sequences[:, 1] * vocab_size + sequences[:, 2], minlength=vocab_size**2).double()
