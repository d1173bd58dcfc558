"""Speculative decoding inside a server's continuous batch: the rows of the requests that speculate, each row
keeping its own count of accepted drafts.

    rows = SpeculativeRows(target, draft, k)     # draft: speculative.check_pair's, beside the served model
    rows.join(works)                             # one encoder pass (the target's; the draft's unless it shares it)
    over = rows.round()                          # every row: k drafts, one check of k + 1 positions, its own count
    rows.leave(works)                            # the rows of requests over, answered or gone

The design: the rounds are generate's (generation.speculative_rounds.SpeculativeBatch: a pair of running
batches, the target's and the draft's, of the same rows in the same order, each row keeping its own count of
accepted drafts and its caches cut back to its own kept length), here beside the scheduler's batch of plain
rows; the scheduler runs one round of them after each plain step (serving.scheduler). Each request is a row
and its own search (generate's SampleSearch: its processors, streamer, stop strings, limits and seeded
generator), which takes the tokens its row kept; a streamer that fails fails its request alone. So a greedy
request's tokens are those of plain greedy on its input alone, and a sampled one's are distributed as plain
sampling's (tests/serving/test_speculative_sampling.py: a chi-square test of the first two tokens).

Who speculates: requests of one row (greedy or sampling; not beams, Whisper, several samples, a fallback)
whose max_new_tokens + k fits the models' position tables (a round writes up to k columns past a row's end);
the others keep stepping in the plain batch. Rows of a round step n + 1 positions whatever their room (n the
most drafts a row has room for): a row within k tokens of its max_new_tokens checks only the drafts that fit,
the others' columns are cut back.

Cost: a round is k draft steps and one target step of k + 1 positions, Python per request for its tokens (one
device -> host copy a round for every row's count). It pays while the target's step of R rows costs much more
than a draft step and about as much at k + 1 positions as at one: at few rows, where a step is weight reads
and kernel launches. At many rows the target's step is already batched and k + 1 positions cost nearly k + 1
times one (docs/recipes.md, "The draft in the server", gives the measured figures).

Shapes: R rows, k draft tokens a round, L a row's tokens so far, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import torch

from encdec.errors import ConfigError
from encdec.generation.config import AssistantTokens, GenerationConfig
from encdec.generation.generate import Prepared
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.interface import capabilities_of
from encdec.generation.speculative import Draft, SpeculativeStats, check_pair, options_refusal
from encdec.generation.speculative_rounds import Proposals, SpeculativeBatch, take
from encdec.schema import Satisfies, check
from encdec.serving.request_rows import Work, fail

NUM_ASSISTANT_TOKENS = GenerationConfig.num_assistant_tokens  # generate's default drafts a round
LOADABLE = "a model (torch.nn.Module) or a function that loads one"


@dataclass
class ServedDraft:
    """`encdec serve --draft`'s draft: the model (or a function that loads it, called in the scheduler's thread
    after the served model), whether it reads the served model's encoder output, the drafts a round. Its fields
    are checked as it is made, as --num-assistant-tokens is (one sentence, ConfigError)."""

    model: Annotated[torch.nn.Module | Callable[[], torch.nn.Module], Satisfies(callable, LOADABLE)]
    shares_encoder: bool = False
    num_assistant_tokens: AssistantTokens = NUM_ASSISTANT_TOKENS

    def __post_init__(self):
        check(self)  # built in Python: the rules --num-assistant-tokens and generate's option read by

    def rows_for(self, target) -> SpeculativeRows:
        """The speculating rows beside `target`, its draft loaded (if not yet) and checked against it
        (speculative.check_pair: one sentence where it cannot draft for it)."""
        model = self.model if isinstance(self.model, torch.nn.Module) else self.model()
        return SpeculativeRows(target, check_pair(target, model, self.shares_encoder), self.num_assistant_tokens)


class SpeculativeRows:
    """The speculating rows of a server: their requests and the running batches they decode in
    (generation.speculative_rounds.SpeculativeBatch, see the module). `draft` is speculative.check_pair's; `k`
    the drafts a round."""

    def __init__(self, target, draft: Draft, k: int):
        self.target, self.draft, self.k = target, draft, k
        self.rounds = SpeculativeBatch(target, draft, k)  # `takes` checks the position tables reach k columns on
        self.works: list[Work] = []
        self.stats = SpeculativeStats()  # every round's, for /metrics and the benchmark
        self.packs = capabilities_of(target).packs_sources

    @property
    def rows(self) -> int:
        return self.rounds.rows

    def takes(self, job: Prepared) -> bool:
        """Whether `job` (a stepwise request: greedy or sampling) speculates here: one row, options speculative
        decoding runs, and room for a round's k columns past its end in both models' position tables."""
        if job.rows != 1 or job.prompt.shape[1] != 1 or options_refusal(job.cfg) is not None:
            return False
        try:
            for model in (self.target, self.draft.model):
                model.check_lengths(job.src_ids, job.cfg.max_new_tokens + self.k)
        except ConfigError:
            return False
        return True

    def join(self, works: list[Work], src_ids: torch.Tensor, src_mask: torch.Tensor, length: int) -> list[range]:
        """The requests `works` (their searches made) started together from their sources (B, S): the target's
        encoder run once, the draft's only where it reads its own; their rows joined to both batches."""
        packed = self.packs and src_ids.shape[0] > 1
        memory = self.target.encode_packed(src_ids, src_mask) if packed else self.target.encode(src_ids, src_mask)
        own = memory if self.draft.shares_encoder else self.draft.model.encode(src_ids, src_mask)
        states = self.target.begin(memory, length), self.draft.model.begin(own, length)
        placed = self.rounds.join(*states, [1] * len(works))
        for work, rows in zip(works, placed):
            work.rows = list(rows)
        self.works += works
        return placed

    def leave(self, leaving: list[Work]) -> None:
        """The rows of `leaving` freed in both batches (the same rows move into their places in each)."""
        rows = [r for work in leaving for r in work.rows]
        self.works = [work for work in self.works if work not in leaving]
        if not rows:
            return
        moved = self.rounds.remove(rows)
        for work in self.works:
            work.rows = [moved.get(r, r) for r in work.rows]

    def round(self) -> list[Work]:
        """One round of every row (see the module); returns the requests now over, answered."""
        works = self.works
        searches, at = [work.search for work in works], [work.rows[0] for work in works]
        out = self.rounds.round(searches, at)
        over = []
        for i, work in enumerate(works):
            work.speculative.count(out.drafted[i], out.kept[i])
            self.stats.count(out.drafted[i], out.kept[i])
            if self._take(work, out, i):
                over.append(work)
        self.rounds.cut_back(searches, at)
        return over

    def fail(self, error: Exception) -> list[Work]:
        """Every request here failed with `error` (a round that raised); they leave at the next boundary."""
        for work in self.works:
            work.done = True
            fail(work.answer, error=error)
        return list(self.works)

    def _take(self, work: Work, out: Proposals, i: int) -> bool:
        """The request's search takes its row's kept drafts and the target's token after them (speculative_rounds
        .take); True once it is over (its answer set), or its streamer failed (its answer that error)."""
        try:
            if not take(work.search, out, i):
                return False
        except Exception as error:  # a streamer that failed: this request alone
            work.done = True
            fail(work.answer, error=error)
            return True
        work.done = True
        result = work.search.result
        work.answer.set_result(GenerateOutput(result.sequences, result.scores, speculative=work.speculative))
        return True
