"""A request's side of the running batch (encdec.serving.scheduler): its place (`Work`), the stand-in model
`generate` drives for it (`RowModel`, whose `start` and `step` hand their work to the scheduler and wait),
and a model served one request at a time that stops once its client is gone (`Abandonable`)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from encdec.generation.generate import Prepared
from encdec.generation.interface import Capabilities, capabilities_of
from encdec.generation.search import SampleSearch
from encdec.generation.speculative import SpeculativeStats


class Abandoned(Exception):
    """The request's client went away; its work was stopped."""


@dataclass
class Work:
    """One request's place in the scheduler: its rows and what it waits for."""

    gone: threading.Event | None = None  # set once the request's client is gone
    waiting: Future | None = None  # what the request's own thread waits for (a beam search's start or step)
    rows: list[int] = field(default_factory=list)
    step: tuple[torch.Tensor, Future | None] | None = None  # tokens (rows,) and where the logits go
    order: list[int] | None = None  # a beam reorder to apply before its next step
    done: bool = False
    search: SampleSearch | None = None  # greedy / sampling run by the scheduler itself (its step's future None)
    greedy: Prepared | None = None  # a greedy request searched on the device (serving.greedy_rows): its job
    answer: Future | None = None  # where that search's output goes
    speculative: SpeculativeStats | None = None  # its search runs in the speculating rows (serving.speculative_rows)


class RowState:
    """`generate`'s decode state for a request served in the running batch: reorders wait for the next step."""

    def __init__(self, work: Work):
        self.work = work

    def reorder(self, index: torch.Tensor) -> None:
        self.work.order = index.tolist()


class RowModel:
    """What `generate` drives for one request: the served model's config and defaults, `start` and `step`
    handed to the scheduler."""

    def __init__(self, scheduler, work: Work):  # scheduler: encdec.serving.scheduler.Scheduler
        self.scheduler, self.work = scheduler, work
        model = scheduler.model
        self.config, self.device = model.config, next(model.parameters()).device
        self.generation_defaults = model.generation_defaults
        self.hf_generation = model.hf_generation  # a Whisper's rules (generation.whisper_rules)
        reads_features = capabilities_of(model).reads_features  # Whisper's prompts: stepped one position a step
        self.capabilities = Capabilities(steps_last_only=reads_features, reads_features=reads_features)

    def start(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, max_new_tokens: int, beams: int = 1):
        """The request's rows joined to the running batch. A request that starts again (Whisper's language
        detection, its next window, a fallback's next temperature) first gives back the rows it held."""
        if self.work.rows:
            self.scheduler.finish(self.work)
            self.work = Work(gone=self.work.gone)
        future: Future = Future()
        self.work.waiting = future
        self.scheduler.submit_start(self.work, src_ids, src_mask, beams, max_new_tokens + 1, future)
        future.result()
        return RowState(self.work)

    def step(self, tgt_ids: torch.Tensor, state: RowState, last_only: bool = False) -> torch.Tensor:
        """tgt_ids (rows, t) -> the logits (rows, 1, V) of their last position: the running batch steps one
        position a row, so a prompt of t tokens (Whisper's) takes t steps, only its last position's logits
        kept (what `last_only` asks; a search reads no other)."""
        if tgt_ids.shape[1] != 1 and not last_only:
            raise ValueError("a served request decodes one position a step")  # no decoder prefix is served
        for position in range(tgt_ids.shape[1]):
            future: Future = Future()
            self.work.waiting = future
            self.scheduler.submit_step(self.work, tgt_ids[:, position], future)
            logits = future.result()
        return logits[:, None]  # (rows, 1, V)


class Abandonable:
    """A model served one request at a time, whose `start` and `step` raise Abandoned once `gone` is set;
    everything else is the model's."""

    def __init__(self, model, gone: threading.Event | None):
        self.model, self.gone = model, gone

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def start(self, *args, **kwargs):
        self.check()
        return self.model.start(*args, **kwargs)

    def step(self, *args, **kwargs):
        self.check()
        return self.model.step(*args, **kwargs)

    def check(self) -> None:
        if self.gone is not None and self.gone.is_set():
            raise Abandoned("the client is gone")


@runtime_checkable
class SearchWatcher(Protocol):
    """A streamer that reads its request's search as it streams (serving.token_stream.ScoredTokens: each step's
    scores): the scheduler hands it the search it makes for the request."""

    def watch(self, search: SampleSearch) -> None: ...


def gone(work: Work) -> bool:
    return work.gone is not None and work.gone.is_set()


def fail(*futures: Future | None, error: Exception | None = None) -> None:
    """`error` (else Abandoned) into each future still waiting (one may be answered in another thread meanwhile)."""
    for future in futures:
        if future is not None and not future.done():
            try:
                future.set_exception(error or Abandoned("the client is gone"))
            except InvalidStateError:
                pass


def padded(
    sources: list[torch.Tensor], bucket: int, pad_id: int, left: bool, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources of their own lengths (n,) -> src_ids and src_mask (B, W), padded on the left or the right to W,
    the longest's length rounded up to a multiple of `bucket` (few distinct shapes reach the kernels)."""
    width = -(-max(len(source) for source in sources) // bucket) * bucket
    src_ids = torch.full((len(sources), width), pad_id, dtype=torch.long, device=device)
    src_mask = torch.zeros(len(sources), width, dtype=torch.bool, device=device)
    for i, source in enumerate(sources):
        at = slice(width - len(source), width) if left else slice(0, len(source))
        src_ids[i, at], src_mask[i, at] = source.to(device), True
    return src_ids, src_mask
