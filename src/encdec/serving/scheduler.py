"""Continuous batching: every request runs `generate` as it would alone; one scheduler runs their steps together.

    request thread:  generate(RowModel)  -- start() -->  scheduler: encode with the others that arrived, give rows
                                         -- step()  -->  scheduler: one decoder step of every running row
                                         <- logits  --   (each request's rows, at their own positions)
    scheduler:       new requests join at a step boundary; a finished request's rows leave (with the next join)

A request's search is encdec's own, the one `generate` would choose (generation.strategies): beam
searches (their own scoring and stopping) are `generate` run in the request's thread against
`RowModel` (encdec.serving.request_rows), a stand-in model whose `start` and `step` hand their work to the scheduler and wait;
plain greedy requests (most: min_new_tokens and forced first or last tokens aside, no processor) are
searched on the device, all their rows at once (encdec.serving.greedy_rows: a fixed number of tensor
operations a step whatever the rows, one device -> host copy to learn which finished, Python only for the
rows that join, finish or stream); the other greedy and sampling requests (its own seeded generator) are
`generate`'s SampleSearch, which the scheduler advances itself after each step (their greedy rows chosen by
one argmax). A greedy or sampling request is checked (generate's checks, `check`) in the scheduler's thread as it
arrives (_admit), not in its own: from a request thread each of the check's tensor operations let Python's lock go
to the thread that steps and waited to take it back. The scheduler owns the running batch, a `RunningBatch` of rows that join and leave
(encdec.modules.running_batch): at a step boundary it starts the requests waiting (one `model.start`
for all of them, once JOIN_BATCH wait or the oldest has waited JOIN_STEPS steps) and joins their
rows to the batch (the rows of greedy requests over meanwhile held, RunningBatch.hold, and leaving with that join's
`remove`, or once they are a LINGER-th of the rows: one remove for many), waits until every running request has
asked for its next step, and runs one
`model.step` over all their rows, each at its own position. So a request's tokens are those of
`generate` on its input alone, whatever else is in flight: the same code chooses them (for the greedy
rows on the device, generate's processors, argmax and stops written for many rows, tested equal), from logits
computed the same way (a row's keys beyond its own length are masked; batched arithmetic may round
differently in the last bit, as any batch does). A decoder prefix and compile are refused in one
sentence: the server steps one position a row, eagerly.
A short request finishes and frees its rows while a long one runs on; a beam request holds its
beams' rows. Every family whose `start` makes a DecodeState (`continuous_batching`) is batched so;
the others (the RNN) generate one request at a time. A Whisper request (one window of log-mels) is
`generate` under Whisper's rules run in its thread against RowModel, as a beam search is: its language
detection, each window it decodes again and each fallback temperature start anew in the batch (the
rows of the one before given back), its prompt of a few tokens stepped one position a step.

With a draft model (`encdec serve --draft`, ServedDraft), the greedy and sampling requests of one output run in
rows of their own (encdec.serving.speculative_rows: the model's and the draft's running batches, the same rows),
one speculative round of them after each plain step: k draft steps, one step of the model over each row's k + 1
positions, each row keeping its own count of accepted drafts; the other requests step in the plain batch as above.

A request whose client is gone (its `gone` event set, then `wake()`) stops at the next step boundary,
wherever it is: waiting to join (it leaves the queue), running (its rows leave, its thread's wait
fails with `Abandoned`), or served alone (its next step raises `Abandoned`). Nothing of it stays. (The
greedy rows on the device are looked at once woken, not every step, but for those that stream.)

One thread computes. The scheduler's thread loads the model (when given a function that does) and runs
every pass over it: steps, encodes, the other families' `generate`, `exclusive` calls. On CPU this is
worth a third of the throughput: torch's OpenMP kernels keep a pool of worker threads per calling
thread, and once a process holds more such workers than cores, OpenMP stops spinning between kernels
and sleeps, so every one of a step's ~300 small kernels pays a wake-up (a 32-row step of the serving
benchmark took 8.2 ms in the thread that loaded the model against 10.8 ms in another thread).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from encdec.errors import ConfigError, EncdecError
from encdec.generation.generate import Prepared, generate, prepare, resolve_config, whisper_decodes
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.interface import capabilities_of
from encdec.generation.search import argmax
from encdec.generation.speculative import SpeculativeStats
from encdec.generation.strategies import strategy_for
from encdec.modules import RunningBatch
from encdec.serving.greedy_rows import GreedyRows, served_here
from encdec.serving.request_rows import Abandonable, Abandoned, RowModel, SearchWatcher, Work, fail, gone, padded
from encdec.serving.resolved_options import ResolvedOptions
from encdec.serving.speculative_rows import ServedDraft, SpeculativeRows

log = logging.getLogger(__name__)

JOIN_BATCH = 16  # waiting requests that join together beside running rows ...
JOIN_STEPS = 4  # ... or once the oldest has waited this many decoder steps
LINGER = 4  # held rows leave without a join once they are at least a LINGER-th of the running rows
SOURCE_BUCKET = 16  # the joining sources are padded to a multiple of this many tokens (few distinct shapes)

__all__ = ["Abandoned", "Scheduler"]


class Scheduler:
    """Owns the running batch; requests call `run(src_ids, options)` from threads of their own.

    `model` is the model, or a function that loads it, called in the scheduler's thread so that the
    thread that serves the model is the one that made it (see the module's note on one computing thread);
    its exception is raised here. With `draft` (serving.speculative_rows.ServedDraft), the requests that
    speculative decoding serves are decoded so, in rows of their own (SpeculativeRows)."""

    def __init__(
        self,
        model: torch.nn.Module | Callable[[], torch.nn.Module],
        max_rows: int = 64,
        draft: ServedDraft | None = None,
    ):
        self.max_rows = max_rows
        self.spec: SpeculativeRows | None = None  # the speculating rows, with a draft
        self.lock = threading.Condition()
        self.serving_one = 0  # the other families: 1 while a request's generate runs
        self.arrived: list = []  # (work, src_ids, src_mask, options): greedy and sampling requests to check (_admit)
        self.starts: deque = deque()
        self.waiting_since = 0  # the decoder steps run when the oldest waiting request arrived
        self.calls: deque = deque()  # (function, future): run in the scheduler thread between steps
        self.running: list[Work] = []  # the requests that step through `work.step` (beams, their own searches)
        self.greedy: dict[int, Work] = {}  # row -> its greedy request, searched on the device (GreedyRows)
        self.streams: dict[int, Work] = {}  # the greedy rows whose request streams its tokens
        self.finished: list[Work] = []  # requests over (answered, failed or gone): they leave next
        self.lingering: list[Work] = []  # greedy requests over whose rows are held, to leave with the next join
        self.holding: list[int] = []  # the rows of greedy requests just over, to hold (_hold)
        self.woken = False  # wake() was called: look for clients gone among the greedy rows
        self.stopped = False
        self.steps = 0  # decoder steps run, for /metrics
        self.tokens = 0  # rows stepped, for /metrics
        loaded: Future = Future()
        self.thread = threading.Thread(
            target=self._loop, args=(model, draft, loaded), name="encdec-scheduler", daemon=True
        )
        self.thread.start()
        loaded.result()

    # -- the request side ------------------------------------------------------------------------------

    def run(
        self,
        src_ids: torch.Tensor,
        src_mask: torch.Tensor | None,
        options: dict[str, Any],
        gone: threading.Event | None = None,
    ):
        """`generate(model, src_ids, src_mask, **options)` for one request, its steps batched with the others';
        Abandoned once `gone` is set (and the scheduler woken), at the next step boundary."""
        if gone is not None and gone.is_set():
            raise Abandoned("the client is gone")
        if self.batched and self.reads_features and whisper_decodes(self.model, **options):
            return self._whisper(src_ids, src_mask, options, gone)
        if not self.batched:
            self.check(src_ids, src_mask, options)  # checked here, in the request's thread
            return self.exclusive(lambda: self._one(src_ids, src_mask, options, gone))
        cfg = self.resolved(options)  # the options alone: Python, no tensor
        work = Work(gone=gone)
        if not strategy_for(cfg).stepwise:  # generate's own choice of search (generation.strategies)
            self.check(src_ids, src_mask, options)
            try:  # beam searches: the request's thread runs them, each step handed to the scheduler
                return generate(RowModel(self, work), src_ids, src_mask, **options)
            finally:
                self.finish(work)
        # greedy and sampling: the scheduler checks the request (_admit) and runs its search itself, between two
        # steps, no thread woken per step; plain greedy requests (most) on the device, all rows at once
        # (serving.greedy_rows)
        work.answer = Future()
        with self.lock:
            if self.stopped:
                raise RuntimeError("the server is stopping")
            self.arrived.append((work, src_ids, src_mask, options))
            self.lock.notify_all()
        out = work.answer.result()
        return out if cfg.return_dict_in_generate else out.sequences

    def _admit(self) -> None:
        """The greedy and sampling requests that arrived, checked (`check`: generate's checks, each refusal its
        request's answer) and placed to join. In the scheduler's thread: a check's tensor operations there cost
        their own time, where in a request's thread each let Python's lock go to the thread that steps and
        waited to take it back (at 128 clients of a small model, 0.4 ms of a request's 0.5)."""
        with self.lock:
            arrived, self.arrived = self.arrived, []
        for work, src_ids, src_mask, options in arrived:
            try:
                if gone(work):
                    raise Abandoned("the client is gone")
                job = self.check(src_ids, src_mask, options)
                strategy = strategy_for(job.cfg)
                if self.spec is not None and self.spec.takes(job):  # decoded speculatively (serving.speculative_rows)
                    work.search, work.speculative = strategy.search(job), SpeculativeStats()
                elif served_here(job):
                    work.greedy = job
                else:
                    work.search = strategy.search(job)
                if work.search is not None and isinstance(job.cfg.streamer, SearchWatcher):  # log-probabilities
                    job.cfg.streamer.watch(work.search)
                self.submit_start(work, job.src_ids, job.src_mask, job.rows, job.cfg.max_new_tokens + 1, Future())
            except Exception as error:  # the request's own refusal, raised in its thread
                work.done = True
                fail(work.answer, error=error)

    def _whisper(self, src_ids, src_mask, options: dict[str, Any], gone: threading.Event | None):
        """A Whisper decoding (language detection, its windows, temperature fallback: generation.whisper_windows)
        run by `generate` in the request's thread against RowModel, as beam searches are: each of its decodings
        joins the running batch, its prompt stepped one position a step, its steps batched with the others'."""
        given = {name: value for name, value in options.items() if name != "defaults"}
        if resolve_config(self.model, given, options.get("defaults")).compile:
            raise ConfigError("compile is not served: the server's steps are batched over rows of changing shapes")
        if src_ids.shape[0] != 1:
            raise ConfigError(f"the server decodes one recording's window a request, got {src_ids.shape[0]}")
        rows = RowModel(self, Work(gone=gone))
        try:
            return generate(rows, src_ids, src_mask, **options)
        finally:
            self.finish(rows.work)  # its last decoding's rows (RowModel.start gave back the earlier ones)

    def check(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, options: dict[str, Any]) -> Prepared:
        """What `generate` checks before its search (generation.generate.prepare), and what the server cannot
        step, each refusal one sentence; nothing computed, so any thread may ask before a request runs."""
        job = prepare(self.model, src_ids, src_mask, resolved=self.resolved(options), **options)
        if not self.batched:  # served alone, by generate itself
            return job
        if job.prompt.shape[1] > 1:
            raise ConfigError("a decoder prefix (decoder_input_ids) is not served: the server steps one position a row")
        if job.cfg.compile:
            raise ConfigError("compile is not served: the server's steps are batched over rows of changing shapes")
        return job

    def eos_ids(self, options: dict[str, Any]) -> list[int]:
        """The EOS ids `generate` stops at under `options` (its `defaults` included)."""
        options = {k: v for k, v in options.items() if k not in ("streamer", "output_scores")}
        return resolve_config(self.model, options, options.pop("defaults", None)).eos_ids

    def exclusive(self, fn: Callable[[], Any]) -> Any:
        """fn() run in the scheduler's thread while no step runs (between two steps), e.g. a pass that records
        attention in the model's modules; its result or its exception."""
        future: Future = Future()
        with self.lock:
            self.calls.append((fn, future))
            self.lock.notify_all()
        return future.result()

    def submit_start(self, work, src_ids, src_mask, copies: int, length: int, future: Future) -> None:
        with self.lock:
            if self.stopped:
                raise RuntimeError("the server is stopping")
            if gone(work):
                raise Abandoned("the client is gone")
            if not self.starts:
                self.waiting_since = self.steps
            self.starts.append((work, src_ids, src_mask, copies, length, future))
            self.lock.notify_all()

    def submit_step(self, work: Work, tokens: torch.Tensor, future: Future) -> None:
        with self.lock:
            if work.done:  # its client went away meanwhile: it has left the batch
                raise Abandoned("the client is gone")
            work.step = (tokens, future)
            self.lock.notify_all()

    def finish(self, work: Work) -> None:
        with self.lock:
            work.done = True
            self.lock.notify_all()

    def wake(self) -> None:
        """Look again now (a request's `gone` event was set)."""
        with self.lock:
            self.woken = True
            self.lock.notify_all()

    def stop(self, timeout: float | None = None) -> None:
        """Take no new requests; return once those running have finished (or `timeout` has passed)."""
        with self.lock:
            self.stopped = True
            self.lock.notify_all()
        if self.thread.is_alive():
            self.thread.join(timeout)

    @property
    def running_rows(self) -> int:
        if self.batch is None:
            return self.serving_one
        return self.batch.rows + (self.spec.rows if self.spec is not None else 0)

    @property
    def speculating(self) -> list[Work]:
        return self.spec.works if self.spec is not None else []

    # -- the scheduler thread --------------------------------------------------------------------------

    def _loop(self, model, draft: ServedDraft | None, loaded: Future) -> None:
        try:
            self.model = model if isinstance(model, torch.nn.Module) else model()
            self.resolved = ResolvedOptions(self.model)  # its requests' option sets, each resolved once
            self.batched = capabilities_of(self.model).continuous_batching
            self.spec = draft.rows_for(self.model) if draft is not None else None
            self.reads_features = capabilities_of(self.model).reads_features  # a speech model's windows
            like = next(self.model.parameters())
            self.batch = RunningBatch(like.device, like.dtype) if self.batched else None
            self.rows = GreedyRows(like.device) if self.batched else None
        except BaseException as error:  # the loader's refusal, raised in the thread that made the scheduler
            loaded.set_exception(error)
            return
        loaded.set_result(None)
        with torch.inference_mode():  # the slot buffers are inference tensors, changed in place
            self._serve()

    def _one(self, src_ids, src_mask, options, gone: threading.Event | None):
        """A request of a model without the row step: its whole generate, alone, stopped once `gone` is set."""
        self.serving_one = 1
        try:
            return generate(Abandonable(self.model, gone), src_ids, src_mask, **options)
        finally:
            self.serving_one = 0

    def _serve(self) -> None:
        while True:
            if self.arrived:
                self._admit()
            with self.lock:
                self.lock.wait_for(self._ready, timeout=0.05)
                if self.arrived:
                    continue  # checked before anything else
                if self.stopped and not (self.running or self.greedy or self.starts or self.speculating):
                    return
                self._abandon()
                calls = list(self.calls)
                self.calls.clear()
                leaving = [w for w in self.running if w.done] + self.finished
                self.running, self.finished = [w for w in self.running if not w.done], []
                joining = self._joining()
                if joining or LINGER * len(self.lingering) >= self.running_rows:  # the held rows leave together
                    leaving, self.lingering = leaving + self.lingering, []
                # a step waits for every running request; joiners step from the next boundary on
                ready = not joining and (self.running or self.greedy)
                ready = ready and all(w.step is not None for w in self.running)
                steps = [(w, *w.step) for w in self.running] if ready else []
                for work in self.running if ready else []:
                    work.step = None  # taken: the request asks again only once it has its logits
            for fn, future in calls:
                try:
                    future.set_result(fn())
                except Exception as error:
                    future.set_exception(error)
            try:
                self._leave(leaving)
                self._join(joining)
                if ready:
                    self._step(steps)
                if self.speculating:
                    self._round()
            except Exception as error:  # a failed batch fails its requests, never the server
                log.exception("a scheduler step failed")
                futures = [f for *_, f in joining] + [f for *_, f in steps] + [w.answer for w, *_ in steps]
                futures += [w.answer for w, *_ in joining if w.answer is not None]
                for future in futures:
                    if future is not None and not future.done():
                        future.set_exception(error)
                for work, *_ in [*joining, *steps]:
                    if work.search is not None or work.greedy is not None:
                        work.done = True
                for work in self.greedy.values():
                    self._greedy_over(work, error)

    def _abandon(self) -> None:
        """Under the lock: the requests whose client is gone leave the queue, and their rows at this boundary;
        whatever they (or their threads) wait for fails with Abandoned."""
        for job in [job for job in self.starts if gone(job[0])]:
            self.starts.remove(job)
            fail(job[0].waiting, job[-1], job[0].answer)
        for work in self.running:
            if gone(work) and not work.done:
                work.done = True
                fail(work.waiting, work.answer)
        for work in self.speculating:  # a few requests a round: looked at every round
            if gone(work) and not work.done:
                work.done = True
                fail(work.answer)
                self.finished.append(work)
        if self.woken:  # the greedy rows are looked at only when woken (their streaming ones at every step)
            self.woken = False
            for work in self.greedy.values():
                if gone(work) and not work.done:
                    self._greedy_over(work, Abandoned("the client is gone"))

    def _ready(self) -> bool:
        """Something to do: requests to encode, rows to free, a client gone, or every running request waiting
        for a step."""
        if self.arrived or self._may_join() or self.calls or self.finished or self.woken or self.speculating:
            return True
        if any(w.done or gone(w) for w in self.running) or any(gone(job[0]) for job in self.starts):
            return True
        if self.running or self.greedy:
            return all(w.step is not None for w in self.running)
        return self.stopped

    def _may_join(self) -> bool:
        """Whether the waiting requests join now: at once beside no running rows, else JOIN_BATCH of them
        together or once the oldest has waited JOIN_STEPS decoder steps. An encoder pass costs about 9 ms
        before its first token at the serving benchmark's shape (its weights read, its ~200 kernels
        launched) and 0.23 ms a token after it, so joining one source at a time (each step, at 32 clients)
        spent a quarter of the scheduler's time encoding, and a long request paid each pass; in steps, not
        seconds, so that the wait is a few steps on any device."""
        if not self.starts:
            return False
        if not (self.running or self.greedy or self.speculating) or self.stopped:
            return True
        return len(self.starts) >= JOIN_BATCH or self.steps - self.waiting_since >= JOIN_STEPS

    def _joining(self) -> list:
        """The waiting requests that fit beside the running rows (at least one, whatever its size), when
        they may join (_may_join); windows of log-mels at most JOIN_BATCH a join (an encoder pass over 16 windows
        of 30 s holds 16 x 1500^2 scores a head; more wait for the next step's join)."""
        if not self._may_join():
            return []
        joining, rows = [], self.running_rows - len(self.lingering)  # held rows leave before a join
        most = JOIN_BATCH if self.reads_features else len(self.starts)
        while self.starts and (rows == 0 or rows + self.starts[0][3] <= self.max_rows) and len(joining) < most:
            job = self.starts.popleft()
            joining.append(job)
            rows += job[3]
        self.waiting_since = self.steps  # the rest wait anew
        return joining

    def _leave(self, leaving: list[Work]) -> None:
        """The rows of `leaving` freed; the rows that move into their places (RunningBatch.remove) take their
        greedy state along: Python over the rows that leave and move, not over every row."""
        self._hold()
        if self.spec is not None:
            self.spec.leave([w for w in leaving if w.speculative is not None])
        rows = [r for w in leaving if w.speculative is None for r in w.rows]
        if not rows:
            return
        for row in rows:
            self.greedy.pop(row, None)
            self.streams.pop(row, None)
        held = self.batch.rows
        moved = self.batch.remove(rows)
        if moved:
            device = self.batch.device
            self.rows.move(torch.tensor(list(moved.values()), device=device), torch.tensor(list(moved), device=device))
        self.rows.leave(slice(self.batch.rows, held))
        for old, new in moved.items():
            for rows_of in (self.greedy, self.streams):
                if old in rows_of:
                    rows_of[new] = rows_of.pop(old)
                    rows_of[new].rows = [new]
        for work in self.running:
            work.rows = [moved.get(r, r) for r in work.rows]
        if self.batch.rows == 0:
            self.rows.trim()

    def _join(self, joining: list) -> None:
        """Start the joining requests together (one `model.start`: one encoder pass, or one prefill) and join
        their rows to the running batch. An input the model refuses there (T5Gemma 2's image token) is its
        request's answer, a sentence, not logged: the others start without it."""
        if not joining:
            return
        try:
            speculating = [job for job in joining if job[0].speculative is not None]
            if speculating:
                self._join_speculating(speculating)
            joining = [job for job in joining if job[0].speculative is None]
            if not joining:
                return
            started = self._start(joining)
        except EncdecError as error:
            if len(joining) > 1:  # which one: each alone (a refusal is rare; the others' rows are unchanged)
                for job in joining:
                    self._join([job])
                return
            log.debug("an input was refused: %s", error)
            fail(joining[0][-1], joining[0][0].answer, error=error)
            joining[0][0].done = True
            return
        placed = self.batch.join(started, [job[3] for job in joining])
        self.rows.reserve(self.batch.capacity_rows)
        greedy = []  # (row, its request) of the greedy requests that join
        for (work, *_, future), rows in zip(joining, placed):
            work.rows = list(rows)
            future.set_result(None)
            if work.greedy is not None:
                greedy.append((rows[0], work))
                self.greedy[rows[0]] = work
                if work.greedy.cfg.streamer is not None:
                    self.streams[rows[0]] = work
                continue
            self.running.append(work)
            if work.search is not None:  # its first step: the decoder-start token of each row
                work.step = (work.search.seqs[:, 0], None)
        if greedy:
            self.rows.join([row for row, _ in greedy], [work.greedy for _, work in greedy])

    def _join_speculating(self, joining: list) -> None:
        """Start the joining requests that speculate together (one encoder pass) in the speculating rows."""
        sources = [src[0] if mask is None else src[0][mask[0].bool()] for _, src, mask, *_ in joining]
        src_ids, src_mask = padded(sources, SOURCE_BUCKET, self.model.config.pad_id, False, self.batch.device)
        self.spec.join([job[0] for job in joining], src_ids, src_mask, max(job[4] for job in joining) - 1)
        for work, *_, future in joining:
            future.set_result(None)

    def _round(self) -> None:
        """One speculative round of the speculating rows (SpeculativeRows.round); the requests it ended leave at
        the next boundary."""
        try:
            over = self.spec.round()
        except Exception as error:  # a failed round fails its requests, never the server nor the plain rows
            log.exception("a speculative round failed")
            over = self.spec.fail(error)
        self.steps += 1
        self.tokens += self.spec.rows
        with self.lock:
            self.finished += over

    def _start(self, joining: list):
        """One `model.start` of the joining requests' sources, packed or padded to a bucket's width."""
        offers, length = capabilities_of(self.model), max(job[4] for job in joining) - 1
        if self.reads_features:  # a speech encoder's windows (C, T), one a request, every frame read
            features = torch.stack([src[0] for _, src, *_ in joining]).to(self.batch.device)  # (B, C, T)
            return self.model.start(features, None, length)
        sources = [src[0] if mask is None else src[0][mask[0].bool()] for _, src, mask, *_ in joining]
        # a causal LM's prompts end where generation starts: padded left
        pad_id = self.model.config.pad_id
        src_ids, src_mask = padded(sources, SOURCE_BUCKET, pad_id, offers.pads_left, self.batch.device)
        packed = {"packed": True} if offers.packs_sources else {}  # no padding encoded
        return self.model.start(src_ids, src_mask, length, **packed)

    def _step(self, steps: list[tuple[Work, torch.Tensor, Future]]) -> None:
        """One decoder step of every running row: the greedy rows advanced on the device (_advance_greedy),
        each other request given its rows' logits."""
        n, device = self.batch.rows, self.batch.device
        if n == 0:  # the greedy rows that were left have just left
            return
        for work, *_ in steps:
            if work.order is not None:
                self.batch.reorder_rows(work.rows, work.order)
                work.order = None
        tokens = self.rows.inputs  # every row's next input: the greedy rows' there already, the others' set here
        if steps:
            order = torch.tensor([row for work, *_ in steps for row in work.rows], device=device)  # one index for all
            tokens[order] = torch.cat([chosen.to(device) for _, chosen, _ in steps])
        logits = self.model.step(tokens[:n, None], self.batch)[:, -1].float()
        self.steps += 1
        self.tokens += n
        searched = []  # the searches the scheduler runs, with their rows' logits
        if steps:
            mine = logits.index_select(0, order).split([len(work.rows) for work, *_ in steps])
            for (work, _, future), rows in zip(steps, mine):
                if future is not None:
                    future.set_result(rows)
                else:
                    searched.append((work, rows))
        if self.greedy:
            self._advance_greedy(logits, n)
        self._advance(searched)

    def _advance_greedy(self, logits: torch.Tensor, n: int) -> None:
        """One step of every greedy row, on the device (GreedyRows.advance); Python for the rows whose request
        is over, and for those that stream (one device -> host copy of the step's tokens for all of them)."""
        over = dict(zip(*self.rows.advance(logits, n).tolist()))  # row -> its length, of the rows now over
        if self.streams:
            tokens = self.rows.tokens.cpu()
            for row, work in list(self.streams.items()):
                if work.done:
                    continue
                try:
                    work.greedy.cfg.streamer(tokens[row : row + 1])
                except Exception as error:  # a streamer that failed: this request alone
                    self._greedy_over(work, error)
                    continue
                if gone(work):  # its client went away meanwhile (the streamer may say so)
                    self._greedy_over(work, Abandoned("the client is gone"))
        for row, length in over.items():
            self._greedy_over(self.greedy[row], length=length)
        self._hold()

    def _hold(self) -> None:
        """The rows of the greedy requests just over are held (RunningBatch.hold) and no longer searched
        (GreedyRows.leave): they leave with the next join's (or once LINGER of the rows are held), one
        `remove` for many, which moves caches, memory rows and row tensors whatever their number."""
        if self.holding:
            rows = torch.tensor(self.holding, device=self.batch.device)
            self.batch.hold(rows)
            self.rows.leave(rows)
            self.holding = []

    def _greedy_over(self, work: Work, error: Exception | None = None, length: int = 0) -> None:
        """A greedy request is over: its answer (its row's `length` tokens) or `error`; its row leaves at the next
        boundary."""
        if work.done:
            return
        with self.lock:  # re-entrant: _abandon holds it
            work.done = True
            self.lingering.append(work)
            self.holding += work.rows
        if error is not None:
            fail(work.answer, error=error)
        else:
            work.answer.set_result(GenerateOutput(self.rows.output(work.rows[0], length)))

    def _advance(self, searched: list[tuple[Work, torch.Tensor]]) -> None:
        """One step of the searches the scheduler runs: each through its own processors, the tokens of every
        greedy row chosen by one argmax (one call for all of them: 24 rows took 70 us, against 28 us a row
        one by one), each search's tokens appended; a search that is over answers its request."""
        greedy = []  # (work, scores)
        for work, logits in searched:
            try:
                if work.search.cfg.do_sample:  # its own generator draws its tokens
                    self._advanced(work, work.search.advance(logits))
                else:
                    greedy.append((work, work.search.scores(logits)))
            except Exception as error:  # a processor or a streamer that failed: this request alone
                self._advanced(work, True, error)
        if not greedy:
            return
        tokens = argmax(torch.cat([scores for _, scores in greedy])).split([len(s) for _, s in greedy])
        for (work, _), chosen in zip(greedy, tokens):
            try:
                self._advanced(work, work.search.take(chosen))
            except Exception as error:
                self._advanced(work, True, error)

    def _advanced(self, work: Work, over: bool, error: Exception | None = None) -> None:
        """After a search's step: its next tokens wait for the next decoder step, or it answers its request."""
        if error is not None:
            work.search.result = error
        if not over:
            with self.lock:
                work.step = (work.search.tokens, None)
            return
        with self.lock:
            work.done = True
        result = work.search.result
        work.answer.set_exception(result) if isinstance(result, Exception) else work.answer.set_result(result)
