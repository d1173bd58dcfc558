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
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.interface import SearchState, Steppable, model_device, prompt_logits
from encdec.generation.logits_processors import apply_all, build_processors

SYNC_EVERY = 8  # steps between host syncs of the stop test on an accelerator
StopTest = Callable[[torch.Tensor], torch.Tensor]  # token ids (R, L) -> (R,) bool, e.g. `StopStrings`


ARGMAX_BLOCK = 64  # elements per block of `argmax`'s first pass


def choose_tokens(scores: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None) -> torch.Tensor:
    """scores (R, V) -> tokens (R,): the argmax, or a draw from softmax(scores)."""
    if not cfg.do_sample:
        return argmax(scores)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)


def argmax(scores: torch.Tensor) -> torch.Tensor:
    """scores (R, V) -> (R,) the index of each row's first maximum (a NaN counting as one), `argmax(-1)`'s.

    On CPU torch's argmax walks a row one element at a time (28 us a row of 32,128 here) while its max
    is vectorised (3 us): so the maximum of each block of ARGMAX_BLOCK elements first, then the argmax over
    the first block holding the row's maximum. 24 rows: 70 against 380 us; one: 19 against 28."""
    R, V = scores.shape
    if scores.device.type != "cpu" or V % ARGMAX_BLOCK or V < 4 * ARGMAX_BLOCK:
        return scores.argmax(dim=-1)
    blocks = scores.view(R, V // ARGMAX_BLOCK, ARGMAX_BLOCK)
    block = blocks.amax(dim=-1).argmax(dim=-1)  # (R,) the first block holding the maximum
    within = blocks[torch.arange(R, device=scores.device), block].argmax(dim=-1)
    return block * ARGMAX_BLOCK + within


def sync_interval(device: torch.device, cfg: GenerationConfig) -> int:
    """Steps between host syncs of the stop test: 1 on a CPU or where a streamer or output_scores sees
    every step, else SYNC_EVERY."""
    return 1 if device.type == "cpu" or cfg.streamer is not None or cfg.output_scores else SYNC_EVERY


class SampleSearch:
    """Greedy or sampled decoding of the rows of `prompt` (R, P) one step at a time: `advance(logits)` takes
    the logits (R, V) of every row's last position, chooses its next token (`tokens`) and says whether the
    search is over (then `result` holds the output). `sample_search` drives it with a model; a server's
    scheduler (encdec.serving) drives many, each with its own rows of one batched step."""

    def __init__(self, prompt: torch.Tensor, cfg: GenerationConfig, device: torch.device, stop_test: StopTest | None):
        rows, length = prompt.shape
        self.cfg, self.stop_test, self.prompt_length, self.length = cfg, stop_test, length, length
        self.max_length = cfg.max_new_tokens + length
        self.has_eos = bool(cfg.eos_ids)
        self.eos = torch.tensor(cfg.eos_ids, dtype=torch.long, device=device)
        self.seqs = torch.empty((rows, self.max_length), dtype=torch.long, device=device)  # (R, L)
        self.seqs[:, :length] = prompt
        self.unfinished = torch.ones(rows, dtype=torch.bool, device=device)
        self.chain = build_processors(cfg, self.max_length, device, prompt_length=length)
        self.generator = cfg.make_generator(device)
        self.steps: list[torch.Tensor] | None = [] if cfg.output_scores else None
        self.can_stop = self.has_eos or stop_test is not None
        self.every = sync_interval(device, cfg)
        self.done_at = torch.full((), self.max_length, dtype=torch.long, device=device)  # length when all were done
        self.tokens: torch.Tensor | None = None  # (R,) the tokens chosen last
        self.result: GenerateOutput | None = None

    def advance(self, logits: torch.Tensor) -> bool:
        """Choose every row's next token from `logits` (R, V); True once the search is over."""
        scores = self.scores(logits)
        return self.take(choose_tokens(scores, self.cfg, self.generator))

    def scores(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits (R, V) through the processors: what the next tokens are chosen from (kept when
        output_scores asks)."""
        scores = apply_all(self.chain, self.seqs[:, : self.length], logits)
        if self.steps is not None:
            self.steps.append(scores)
        return scores

    def take(self, tokens: torch.Tensor) -> bool:
        """Append the chosen `tokens` (R,) (finished rows get the pad token); True once the search is over."""
        cfg = self.cfg
        if self.has_eos:
            tokens = torch.where(self.unfinished, tokens, cfg.pad_token_id)
        self.seqs[:, self.length] = tokens
        self.length += 1
        self.tokens = tokens
        if cfg.streamer is not None:
            cfg.streamer(tokens)
        if self.has_eos:
            self.unfinished &= ~torch.isin(tokens, self.eos)
        if self.stop_test is not None:
            self.unfinished &= ~self.stop_test(self.seqs[:, : self.length])
        length, max_length = self.length, self.max_length
        if self.can_stop and self.every > 1:
            self.done_at = torch.where(self.unfinished.any() | (self.done_at < length), self.done_at, length)
            if length >= max_length or (length - self.prompt_length) % self.every == 0:
                if length >= max_length or int(self.done_at) < max_length:  # the sync, every `every` steps
                    self.result = GenerateOutput(self.seqs[:, : int(self.done_at)], None)
        elif length >= max_length or (self.can_stop and not bool(self.unfinished.any())):  # one sync
            steps = tuple(self.steps) if self.steps is not None else None
            self.result = GenerateOutput(self.seqs[:, :length], steps)
        return self.result is not None


def sample_search(
    model: Steppable,
    state: SearchState,
    prompt: torch.Tensor,
    cfg: GenerationConfig,
    device: torch.device | None = None,
    stop_test: StopTest | None = None,
) -> GenerateOutput:
    """Greedy (do_sample False) or sampled decoding on `device` (default: the model's) of the rows of
    `prompt` (R, P), the decoder-start token and any prefix -> token ids (R, L) starting with it."""
    device = device if device is not None else model_device(model)
    search = SampleSearch(prompt, cfg, device, stop_test)
    logits = prompt_logits(model, prompt, state).float()  # (R, V)
    while not search.advance(logits):
        logits = model.step(search.tokens[:, None], state)[:, -1].float()
    return search.result
