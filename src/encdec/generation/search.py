"""Greedy decoding and sampling: one token per row per step, through the model's cache.

Rows that produced EOS keep receiving the pad token until every row is done or
`max_new_tokens` is reached, exactly as Hugging Face's `_sample` does, so the
outputs compare column for column. Every tensor lives on the model's device; the
one host sync per step is the stop test (skipped without EOS).

Shapes: R rows (examples times samples), L tokens so far including the start token, V vocabulary.
"""

import torch

from encdec.generation.config import GenerationConfig
from encdec.generation.interface import DecodeState, Steppable, model_device
from encdec.generation.logits_processors import apply_all, build_processors


def choose_tokens(scores: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None) -> torch.Tensor:
    """scores (R, V) -> tokens (R,): the argmax, or a draw from softmax(scores)."""
    if not cfg.do_sample:
        return scores.argmax(dim=-1)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)


def sample_search(
    model: Steppable, state: DecodeState, rows: int, cfg: GenerationConfig, device: torch.device | None = None
) -> torch.Tensor:
    """Greedy (do_sample False) or sampled decoding of `rows` rows on `device` (default: the model's)
    -> token ids (R, L)."""
    device = device if device is not None else model_device(model)
    max_length = cfg.max_new_tokens + 1
    has_eos = bool(cfg.eos_ids)
    eos = torch.tensor(cfg.eos_ids, dtype=torch.long, device=device)
    seqs = torch.full((rows, max_length), cfg.decoder_start_token_id, dtype=torch.long, device=device)  # (R, L)
    unfinished = torch.ones(rows, dtype=torch.bool, device=device)
    chain = build_processors(cfg, max_length, device)
    generator = cfg.make_generator(device)
    logits = model.step(seqs[:, :1], state)[:, -1].float()  # (R, V)
    length = 1
    while True:
        scores = apply_all(chain, seqs[:, :length], logits)
        tokens = choose_tokens(scores, cfg, generator)
        if has_eos:
            tokens = torch.where(unfinished, tokens, cfg.pad_token_id)
        seqs[:, length] = tokens
        length += 1
        if cfg.streamer is not None:
            cfg.streamer(tokens)
        if has_eos:
            unfinished &= ~torch.isin(tokens, eos)
        if length >= max_length or (has_eos and not bool(unfinished.any())):  # the step's one host sync
            return seqs[:, :length]
        logits = model.step(tokens[:, None], state)[:, -1].float()
