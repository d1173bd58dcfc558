"""Score processors applied before each token choice, in Hugging Face's order and with its semantics.

    repetition penalty -> no-repeat n-gram -> bad words -> min new tokens -> forced BOS
    -> forced EOS -> exponential decay -> suppress tokens -> suppress at begin, then for
    sampling only: temperature -> top-k -> top-p -> min-p -> typical -> epsilon -> eta,
    and last, when asked, renormalisation (log-softmax)

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


def exponential_decay(
    start: int, factor: float, eos_ids: list[int], device: torch.device | str | None = None
) -> Processor:
    """Once rows hold more than `start` tokens, raise EOS scores by |score| * (factor ** (length - start) - 1)."""
    eos = torch.tensor(eos_ids, dtype=torch.long, device=device)

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        steps = seqs.shape[1] - start
        if steps <= 0:
            return scores
        eos_scores = scores[:, eos]  # (R, E)
        try:
            growth = pow(factor, steps) - 1
        except OverflowError:  # past a float's range (Hugging Face raises here): the score's dtype holds inf
            growth = math.inf
        penalty = eos_scores.abs() * growth
        penalty = penalty.masked_fill(penalty.isnan(), 0.0)  # a zero score times inf: no penalty
        return scores.index_add(1, eos, penalty.masked_fill(~torch.isfinite(eos_scores), 0.0))

    return apply


def suppress(tokens: list[int], at_length: int | None = None, device: torch.device | str | None = None) -> Processor:
    """Ban `tokens` (ids beyond the vocabulary are ignored): always, or only when rows hold `at_length` tokens."""
    banned = torch.tensor(tokens, dtype=torch.long, device=device)
    masks: dict[tuple, torch.Tensor] = {}  # the banned ids as a (V,) mask, made once per vocabulary and device

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if at_length is not None and seqs.shape[1] != at_length:
            return scores
        key = (scores.shape[-1], scores.device)
        if key not in masks:  # isin over Whisper's 51,865 ids took 0.16 ms a step, as long as a step's head on CPU
            masks[key] = torch.isin(torch.arange(scores.shape[-1], device=scores.device), banned.to(scores.device))
        return scores.masked_fill(masks[key], -math.inf)

    return apply


def timestamp_rules(
    no_timestamps: int,
    eos: int,
    begin: int,
    max_initial_index: int | None,
    device: torch.device | str | None = None,
    last_index: int | None = None,
) -> Processor:
    """Whisper's timestamps (Radford et al. 2022, 4.5; transformers' WhisperTimeStampLogitsProcessor), rows holding
    `begin` prompt tokens: <|notimestamps|> banned; timestamps (ids from no_timestamps + 1) in pairs, so after a
    lone one only a timestamp or EOS and after a pair only text; none below the row's last (nor equal, unless it
    closes a pair); the first new token a timestamp of index at most `max_initial_index`; none past `last_index`
    (the window's end: a model whose window is shorter than its vocabulary's 30 s, whose later timestamps would
    move long form past speech it never read; None: every one); and where the timestamps' probability mass beats
    the best text token's, a timestamp. Every row at once, on the device."""
    first = no_timestamps + 1

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        R, V = scores.shape
        device = scores.device
        new = seqs[:, begin:]  # (R, G) the tokens generated so far
        is_time = new >= first
        G = new.shape[1]
        last = is_time[:, -1] if G else torch.zeros(R, dtype=torch.bool, device=device)
        before = is_time[:, -2] if G >= 2 else torch.ones(R, dtype=torch.bool, device=device)
        lone = last & ~before
        lowest = torch.full((R,), first, device=device)  # the first timestamp the row may take
        if G:  # not below the row's last timestamp (nor equal to it, but to close a pair); after a pair, none
            where = (is_time * torch.arange(1, G + 1, device=device)).argmax(dim=1)  # (R,) its position
            latest = new.gather(1, where[:, None])[:, 0]
            lowest = torch.where(is_time.any(dim=1), torch.where(lone, latest, latest + 1), lowest)
            lowest = torch.where(last & before, V, lowest)
        scores = scores.clone()  # the bans below write ranges and add -inf by row: a (R, V) mask costs 5x more
        scores[:, no_timestamps] = -math.inf
        if last_index is not None:
            scores[:, first + last_index + 1 :] = -math.inf
        if G == 0:  # the first new token: a timestamp, no later than max_initial_index
            scores[:, :first] = -math.inf
            if max_initial_index is not None:
                scores[:, first + max_initial_index + 1 :] = -math.inf
        else:  # after a lone timestamp, no text (EOS and the special tokens stay)
            scores[:, :eos] += torch.where(lone, -math.inf, 0.0)[:, None]
        times = torch.arange(first, V, device=device)
        scores[:, first:].masked_fill_(times < lowest[:, None], -math.inf)
        log_probs = scores.float().log_softmax(dim=-1)
        time_mass = log_probs[:, first:].logsumexp(dim=-1)  # (R,)
        best_text = log_probs[:, :first].amax(dim=-1)
        scores[:, :first] += torch.where(time_mass > best_text, -math.inf, 0.0)[:, None]
        return scores

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


def top_k_then_top_p(k: int, p: float, keep: int = 1) -> Processor:
    """top_k(k) then top_p(p), with top_p's values to the bit and without its sort over the vocabulary.

    After top-k only the k best scores are finite (unless some tie with the k-th), so the row top-p
    sorts is the -inf's followed by those k in ascending order, which torch.topk gives: that row is
    built and put through top_p's own softmax and cumsum over V, so every cumulative probability, and
    each keep-or-drop decision, is the one top_p makes. (Tokens whose scores tie exactly may sit in
    another order than torch.sort's, and where such a tie meets the top-p boundary the token dropped
    may differ.) On CPU the sort of 8 x 8,192 scores took 0.9 ms a step, this 0.1 ms. A row with more
    than k finite scores (a tie at the k-th) runs the two processors as they are; that test waits for
    the host, so on other devices, where sorting costs little, the two always run as they are."""
    by_p = top_p(p, keep)

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        V = scores.shape[-1]
        n = min(max(k, keep), V)
        values, indices = torch.topk(scores, n)  # (R, n), descending
        kept = scores.masked_fill(scores < values[..., -1:], -math.inf)  # what top_k returns
        if scores.device.type != "cpu" or bool((kept > -math.inf).sum(-1).gt(n).any()):
            return by_p(seqs, kept)
        row = torch.cat((scores.new_full((scores.shape[0], V - n), -math.inf), values.flip(-1)), dim=-1)
        drop = row.softmax(dim=-1).cumsum(dim=-1) <= 1 - p  # top_p's, on the row its sort would give
        drop[..., -keep:] = False
        dropped = torch.zeros_like(drop).scatter_(1, indices.flip(-1), drop[..., V - n :])
        return kept.masked_fill(dropped, -math.inf)

    return apply


def min_p(p: float, keep: int = 1) -> Processor:
    """Keep tokens at least p times as likely as the most likely one (Nguyen et al. 2024, min-p sampling)."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = scores.softmax(dim=-1)
        drop = probs < p * probs.amax(dim=-1, keepdim=True)
        drop.scatter_(-1, torch.topk(probs, min(keep, probs.shape[-1]), dim=-1).indices, False)
        return scores.masked_fill(drop, -math.inf)

    return apply


def typical_p(mass: float, keep: int = 1) -> Processor:
    """Keep the tokens whose surprise is closest to the entropy, up to probability `mass`
    (Meister et al. 2022, locally typical sampling)."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        log_probs = scores.log_softmax(dim=-1)
        entropy = -(log_probs * log_probs.exp()).nansum(-1, keepdim=True)  # (R, 1)
        gaps, order = torch.sort((-log_probs - entropy).abs(), descending=False)
        cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
        last = (cumulative < mass).sum(dim=1).clamp(max=gaps.shape[-1] - 1)  # (R,)
        drop = gaps > gaps.gather(1, last[:, None])
        drop[..., :keep] = False
        return scores.masked_fill(drop.scatter(1, order, drop), -math.inf)

    return apply


def epsilon_cutoff(epsilon: float, keep: int = 1) -> Processor:
    """Drop tokens less likely than `epsilon`, keeping the `keep` best (Hewitt et al. 2022, truncation sampling)."""

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        kth = torch.topk(scores, min(keep, scores.shape[-1]))[0][..., -1, None]
        drop = (scores.softmax(dim=-1) < epsilon) & (scores < kth)
        return scores.masked_fill(drop, -math.inf)

    return apply


def eta_cutoff(epsilon: float, keep: int = 1, device: torch.device | str | None = None) -> Processor:
    """Drop tokens less likely than min(epsilon, sqrt(epsilon) * exp(-entropy)) (Hewitt et al. 2022, eta sampling)."""
    eps = torch.tensor(epsilon, device=device)

    def apply(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        entropy = torch.distributions.Categorical(logits=scores, validate_args=False).entropy()  # (R,)
        eta = torch.min(eps, torch.sqrt(eps) * torch.exp(-entropy))[..., None]
        kth = torch.topk(scores, min(keep, scores.shape[-1]))[0][..., -1, None]
        drop = (scores.softmax(dim=-1) < eta) & (scores < kth)
        return scores.masked_fill(drop, -math.inf)

    return apply


def renormalize(seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    return scores.log_softmax(dim=-1)


def build_processors(
    cfg: GenerationConfig, max_length: int, device: torch.device | str | None = None, prompt_length: int = 1
) -> list[Processor]:
    """The processors `cfg` asks for, in Hugging Face's order, for scores on `device`; `max_length`
    counts the decoder prompt (the start token and any given prefix), which holds `prompt_length` tokens."""
    chain: list[Processor] = []
    if cfg.repetition_penalty != 1.0:
        chain.append(repetition_penalty(cfg.repetition_penalty))
    if cfg.no_repeat_ngram_size > 0:
        chain.append(no_repeat_ngram(cfg.no_repeat_ngram_size))
    if cfg.bad_words_ids:
        chain.append(bad_words(cfg.bad_words_ids, device))
    if cfg.min_new_tokens > 0 and cfg.eos_ids:
        chain.append(min_new_tokens(cfg.min_new_tokens, cfg.eos_ids, prompt_length, device))
    if cfg.forced_bos_token_id is not None:
        chain.append(forced_token(cfg.forced_bos_token_id, at_length=1))
    if cfg.forced_eos_token_id is not None:
        chain.append(forced_token(cfg.forced_eos_token_id, at_length=max_length - 1))
    if cfg.exponential_decay_length_penalty is not None and cfg.eos_ids:
        start, factor = cfg.exponential_decay_length_penalty
        chain.append(exponential_decay(start + prompt_length, factor, cfg.eos_ids, device))
    if cfg.suppress_tokens is not None:
        chain.append(suppress(cfg.suppress_tokens, device=device))
    if cfg.begin_suppress_tokens is not None:  # as Hugging Face: one later when a forced BOS fills the first slot
        begin = prompt_length + (1 if prompt_length == 1 and cfg.forced_bos_token_id is not None else 0)
        chain.append(suppress(cfg.begin_suppress_tokens, at_length=begin, device=device))
    rules = cfg.whisper
    if rules is not None and cfg.return_timestamps:  # transformers' Whisper puts it after the suppressions
        eos = cfg.eos_ids[0] if cfg.eos_ids else rules.no_timestamps_token_id  # text lies below EOS
        chain.append(
            timestamp_rules(
                rules.no_timestamps_token_id,
                eos,
                prompt_length,
                rules.max_initial_timestamp_index,
                device,
                rules.window_timestamps,
            )
        )
    if cfg.do_sample:
        keep = len(cfg.eos_ids) + 1 if cfg.num_beams > 1 else 1
        if cfg.temperature != 1.0:
            chain.append(temperature(cfg.temperature))
        if cfg.top_k and cfg.top_p < 1.0:
            chain.append(top_k_then_top_p(cfg.top_k, cfg.top_p, keep))
        elif cfg.top_k:
            chain.append(top_k(cfg.top_k, keep))
        elif cfg.top_p < 1.0:
            chain.append(top_p(cfg.top_p, keep))
        if cfg.min_p is not None:
            chain.append(min_p(cfg.min_p, keep))
        if cfg.typical_p < 1.0:
            chain.append(typical_p(cfg.typical_p, keep))
        if cfg.epsilon_cutoff > 0:
            chain.append(epsilon_cutoff(cfg.epsilon_cutoff, keep))
        if cfg.eta_cutoff > 0:
            chain.append(eta_cutoff(cfg.eta_cutoff, keep, device))
    if cfg.renormalize_logits:
        chain.append(renormalize)
    return chain


def apply_all(chain: list[Processor], seqs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    for processor in chain:
        scores = processor(seqs, scores)
    return scores
