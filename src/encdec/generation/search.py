"""Greedy decoding and sampling: one token per row per step, through the model's cache.

Rows that produced EOS keep receiving the pad token until every row is done or
`max_new_tokens` is reached, exactly as Hugging Face's `_sample` does, so the
outputs compare column for column; a row a stop string ended is padded likewise
when there is an EOS, and (as in Hugging Face) keeps generating when there is none.
Every tensor lives on the model's device. The stop test, whether every row is done,
waits for the host: on a CPU that costs nothing and runs every step; on an accelerator
it runs every `SYNC_EVERY` steps, the step at which all rows were first done kept on
the device, and the output is cut there, so it equals a per-step test's (a few
padded steps are computed and dropped; a streamer or output_scores keeps the test at
every step, as they see each step).

Shapes: R rows (examples times samples), P decoder prompt (start token and any prefix),
L tokens so far, V vocabulary.
"""

from collections.abc import Callable

import torch

from encdec.generation.config import GenerationConfig
from encdec.generation.interface import DecodeState, Steppable, model_device, prompt_logits
from encdec.generation.logits_processors import apply_all, build_processors
from encdec.generation.outputs import GenerateOutput

SYNC_EVERY = 8  # steps between host syncs of the stop test on an accelerator
StopTest = Callable[[torch.Tensor], torch.Tensor]  # token ids (R, L) -> (R,) bool, e.g. `StopStrings`


def choose_tokens(scores: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None) -> torch.Tensor:
    """scores (R, V) -> tokens (R,): the argmax, or a draw from softmax(scores)."""
    if not cfg.do_sample:
        return scores.argmax(dim=-1)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)


def sync_interval(device: torch.device, cfg: GenerationConfig) -> int:
    """Steps between host syncs of the stop test: 1 on a CPU or where a streamer or output_scores sees
    every step, else SYNC_EVERY."""
    return 1 if device.type == "cpu" or cfg.streamer is not None or cfg.output_scores else SYNC_EVERY


def sample_search(
    model: Steppable,
    state: DecodeState,
    prompt: torch.Tensor,
    cfg: GenerationConfig,
    device: torch.device | None = None,
    stop_test: StopTest | None = None,
) -> GenerateOutput:
    """Greedy (do_sample False) or sampled decoding on `device` (default: the model's) of the rows of
    `prompt` (R, P), the decoder-start token and any prefix -> token ids (R, L) starting with it."""
    device = device if device is not None else model_device(model)
    rows, length = prompt.shape
    max_length = cfg.max_new_tokens + length
    has_eos = bool(cfg.eos_ids)
    eos = torch.tensor(cfg.eos_ids, dtype=torch.long, device=device)
    seqs = torch.empty((rows, max_length), dtype=torch.long, device=device)  # (R, L)
    seqs[:, :length] = prompt
    unfinished = torch.ones(rows, dtype=torch.bool, device=device)
    chain = build_processors(cfg, max_length, device, prompt_length=length)
    generator = cfg.make_generator(device)
    steps: list[torch.Tensor] | None = [] if cfg.output_scores else None
    can_stop = has_eos or stop_test is not None
    every = sync_interval(device, cfg)
    done_at = torch.full((), max_length, dtype=torch.long, device=device)  # length when all rows were first done
    logits = prompt_logits(model, prompt, state).float()  # (R, V)
    while True:
        scores = apply_all(chain, seqs[:, :length], logits)
        if steps is not None:
            steps.append(scores)
        tokens = choose_tokens(scores, cfg, generator)
        if has_eos:
            tokens = torch.where(unfinished, tokens, cfg.pad_token_id)
        seqs[:, length] = tokens
        length += 1
        if cfg.streamer is not None:
            cfg.streamer(tokens)
        if has_eos:
            unfinished &= ~torch.isin(tokens, eos)
        if stop_test is not None:
            unfinished &= ~stop_test(seqs[:, :length])
        if can_stop and every > 1:
            done_at = torch.where(unfinished.any() | (done_at < length), done_at, length)
            if length >= max_length or (length - prompt.shape[1]) % every == 0:
                if length >= max_length or int(done_at) < max_length:  # the sync, every `every` steps
                    return GenerateOutput(seqs[:, : int(done_at)], None)
        elif length >= max_length or (can_stop and not bool(unfinished.any())):  # one sync
            return GenerateOutput(seqs[:, :length], tuple(steps) if steps is not None else None)
        logits = model.step(tokens[:, None], state)[:, -1].float()
