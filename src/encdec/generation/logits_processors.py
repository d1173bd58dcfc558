"""Score processors applied before each token choice, in Hugging Face's order and with its semantics.

    repetition penalty -> no-repeat n-gram -> bad words -> min new tokens -> forced BOS
    -> forced EOS, then for sampling only: temperature -> top-k -> top-p

Each processor is a function (seqs, scores) -> scores where seqs (R, L) holds every
row's tokens so far, decoder-start token included, and scores (R, V) are logits
(greedy, sampling) or log-probabilities (beam search). Token lists (bad words, EOS)
become tensors once, on the search's device, so no step copies from the host.

Shapes: R rows, L tokens so far, V vocabulary.
"""

import math
from collections.abc import Callable

import torch

from encdec.generation.config import GenerationConfig

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def repetition_penalty(penalty: float) -> Processor:
    """Make every token already in the row less likely: divide positive scores, multiply negative ones
    (Keskar et al. 2019, CTRL, 4.1)."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        seen = scores.gather(1, seqs)
        seen = torch.where(seen < 0, seen * penalty, seen / penalty)
        return scores.scatter(1, seqs, seen)

    return apply


def no_repeat_ngram(n: int) -> Processor:
    """Ban every token that would complete an n-gram already present in the row."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        L = seqs.shape[1]
        if L < n:
            return scores
        if n == 1:
            return scores.scatter(1, seqs, -math.inf)
        windows = seqs.unfold(1, n, 1)  # (R, L-n+1, n)
        prefix = seqs[:, L - n + 1 :]  # (R, n-1): the n-gram the next token would complete
        match = (windows[:, :, :-1] == prefix[:, None, :]).all(-1)  # (R, L-n+1)
        banned = torch.zeros(scores.shape[0], scores.shape[1] + 1, dtype=torch.bool, device=scores.device)
        vocab = scores.shape[1]
        banned.scatter_(1, torch.where(match, windows[:, :, -1], vocab), True)  # column V collects non-matches
        return scores.masked_fill(banned[:, :vocab], -math.inf)

    return apply


def bad_words(words: list[list[int]], device: torch.device | str | None = None) -> Processor:
    """Ban the last token of each listed sequence wherever the row ends with the rest of it."""
    single = torch.tensor([w[0] for w in words if len(w) == 1], dtype=torch.long, device=device)
    longer = [(torch.tensor(w[:-1], dtype=torch.long, device=device), w[-1]) for w in words if len(w) > 1]

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.index_fill(1, single, -math.inf) if len(single) else scores.clone()
        for prefix, last in longer:
            k = len(prefix)
            if seqs.shape[1] >= k:
                ends = (seqs[:, -k:] == prefix).all(-1)  # (R,)
                scores[:, last] = torch.where(ends, -math.inf, scores[:, last])
        return scores

    return apply


def min_new_tokens(
    minimum: int, eos_ids: list[int], prompt_length: int = 1, device: torch.device | str | None = None
) -> Processor:
    """Forbid EOS until `minimum` tokens follow the decoder-start token."""
    eos = torch.tensor(eos_ids, dtype=torch.long, device=device)

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if seqs.shape[1] - prompt_length < minimum:
            scores = scores.index_fill(1, eos, -math.inf)
        return scores

    return apply


def forced_token(token: int, at_length: int) -> Processor:
    """When rows hold `at_length` tokens, the next one must be `token` (BART's forced BOS and EOS)."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if seqs.shape[1] != at_length:
            return scores
        forced = torch.full_like(scores, -math.inf)
        forced[:, token] = 0.0
        return forced

    return apply


def temperature(t: float) -> Processor:
    return lambda seqs, scores: scores / t


def top_k(k: int, keep: int = 1) -> Processor:
    """Keep the k best scores (at least `keep`), -inf elsewhere (Fan et al. 2018)."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        kth = torch.topk(scores, min(max(k, keep), scores.shape[-1]))[0][..., -1:]
        return scores.masked_fill(scores < kth, -math.inf)

    return apply


def top_p(p: float, keep: int = 1) -> Processor:
    """Keep the smallest set of tokens whose probability reaches p (Holtzman et al. 2020, nucleus)."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - p
        drop[..., -keep:] = False
        return scores.masked_fill(drop.scatter(1, order, drop), -math.inf)

    return apply


def build_processors(
    cfg: GenerationConfig, max_length: int, device: torch.device | str | None = None
) -> list[Processor]:
    """The processors `cfg` asks for, in Hugging Face's order, for scores on `device`; `max_length`
    counts the start token."""
    chain: list[Processor] = []
    if cfg.repetition_penalty != 1.0:
        chain.append(repetition_penalty(cfg.repetition_penalty))
    if cfg.no_repeat_ngram_size > 0:
        chain.append(no_repeat_ngram(cfg.no_repeat_ngram_size))
    if cfg.bad_words_ids:
        chain.append(bad_words(cfg.bad_words_ids, device))
    if cfg.min_new_tokens > 0 and cfg.eos_ids:
        chain.append(min_new_tokens(cfg.min_new_tokens, cfg.eos_ids, device=device))
    if cfg.forced_bos_token_id is not None:
        chain.append(forced_token(cfg.forced_bos_token_id, at_length=1))
    if cfg.forced_eos_token_id is not None:
        chain.append(forced_token(cfg.forced_eos_token_id, at_length=max_length - 1))
    if cfg.do_sample:
        keep = len(cfg.eos_ids) + 1 if cfg.num_beams > 1 else 1
        if cfg.temperature != 1.0:
            chain.append(temperature(cfg.temperature))
        if cfg.top_k:
            chain.append(top_k(cfg.top_k, keep))
        if cfg.top_p < 1.0:
            chain.append(top_p(cfg.top_p, keep))
    return chain


def apply_all(chain: list[Processor], seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    for processor in chain:
        scores = processor(seqs, scores)
    return scores
