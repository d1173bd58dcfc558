"""Speculative decoding inside a server's continuous batch: the rows of the requests that speculate, each row
keeping its own count of accepted drafts.

    rows = SpeculativeRows(target, draft, k)     # draft: speculative.check_pair's, beside the served model
    rows.join(works)                             # one encoder pass (the target's; the draft's unless it shares it)
    over = rows.round()                          # every row: k drafts, one check of k + 1 positions, its own count
    rows.leave(works)                            # the rows of requests over, answered or gone

The design: a second pair of running batches (encdec.modules.running_batch), the target's and the draft's, of
the same rows in the same order, beside the scheduler's batch of plain rows; the scheduler runs one round of
them after each plain step (serving.scheduler). A round of R rows is k steps of the draft, one position a row
(its first step two: the row's last two tokens, since a row that kept all k drafts has fed neither its last
draft nor the target's token), then ONE step of the target over k + 1 positions a row (its last kept token
and its k drafts, each row from its own column), then each request's search (generate's SampleSearch, its
processors, streamer, stop strings and limits) takes the tokens its row kept. The acceptance rules are
generate's (generation.speculative: `draft_tokens`, `verify`, applied to each request's rows alone, one call
for all the plain greedy rows), but each row keeps its own count a of accepted drafts and the target's token
after them, where `generate` keeps the batch's fewest: rows advance by different amounts, and each row's
caches are cut back to its own kept length (RunningBatch.cut_back: the target's to every kept token but the
last, the draft's to all but the last two before its next round). So a greedy request's tokens are those of
plain greedy on its input alone, and a sampled one's are distributed as plain sampling's.

Who speculates: requests of one row (greedy or sampling; not beams, Whisper, several samples, a fallback)
whose max_new_tokens + k fits the models' position tables (a round writes up to k columns past a row's end);
the others keep stepping in the plain batch. Rows of a round step k + 1 positions whatever their room: a row
within k tokens of its max_new_tokens checks only the drafts that fit, the others' columns are cut back.

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
from encdec.generation.logits_processors import apply_all
from encdec.generation.search import argmax
from encdec.generation.speculative import (
    Draft,
    SpeculativeStats,
    check_pair,
    draft_tokens,
    options_refusal,
    verify,
)
from encdec.modules import RunningBatch
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
    """The speculating rows of a server: the target's and the draft's running batches and their requests (see
    the module). `draft` is speculative.check_pair's; `k` the drafts a round."""

    def __init__(self, target, draft: Draft, k: int):
        like = next(target.parameters())
        self.target, self.draft, self.k = target, draft, k
        self.batch = RunningBatch(like.device, like.dtype)  # the target's rows
        self.drafts = RunningBatch(like.device, like.dtype)  # the draft's, the same rows in the same order
        self.works: list[Work] = []
        self.stats = SpeculativeStats()  # every round's, for /metrics and the benchmark
        self.packs = capabilities_of(target).packs_sources

    @property
    def rows(self) -> int:
        return self.batch.rows

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
        ones = [1] * len(works)
        placed = self.batch.join(self.target.begin(memory, length), ones)
        self.drafts.join(self.draft.model.begin(own, length), ones)
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
        moved = self.batch.remove(rows)
        self.drafts.remove(rows)
        for work in self.works:
            work.rows = [moved.get(r, r) for r in work.rows]

    def round(self) -> list[Work]:
        """One round of every row (see the module); returns the requests now over, answered."""
        works, k, device = self.works, self.k, self.batch.device
        order = torch.tensor([work.rows[0] for work in works], device=device)  # the rows, in the works' order
        lengths = [work.search.length for work in works]
        room = [min(k, work.search.max_length - length - 1) for work, length in zip(works, lengths)]  # drafts kept
        seqs = [work.search.seqs for work in works]
        at = torch.tensor(lengths, device=device)
        fresh = at == 1  # rows at their decoder-start token alone: their draft cache holds nothing
        inputs = torch.empty(self.rows, 2, dtype=torch.long, device=device)  # each row's last two tokens
        inputs[order, 0] = torch.cat([s[:, max(length - 2, 0)] for s, length in zip(seqs, lengths)])
        inputs[order, 1] = torch.cat([s[:, length - 1] for s, length in zip(seqs, lengths)])  # its last kept one
        self.drafts.cut_back(self._in_rows(order, (at - 2).clamp(min=0)), max(max(lengths) - 2, 0))
        logits = self.draft.model.step(inputs, self.drafts).float()  # (R, 2, V)
        logits = torch.where(fresh[:, None], logits[order, 0], logits[order, 1])  # (R, V), works' order
        self.drafts.cut_back(self._in_rows(order, at), max(lengths))
        drafts, q_scores = [], []  # (R,) a draft step's tokens; (R, V) each's processed scores
        processed = any(work.search.chain for work in works)
        for j in range(k):
            if j:
                step = torch.empty(self.rows, 1, dtype=torch.long, device=device)
                step[order, 0] = drafts[-1]
                logits = self.draft.model.step(step, self.drafts)[:, -1].float().index_select(0, order)
            scores = self._processed(works, logits, [length + j for length in lengths])
            tokens = self._chosen(works, scores)
            if processed:  # a draft the processors read back (their history): written past the search's length
                for i, (s, length, fits) in enumerate(zip(seqs, lengths, room)):
                    if j < fits:
                        s[:, length + j] = tokens[i : i + 1]
            drafts.append(tokens)
            q_scores.append(scores)
        checked = torch.stack([inputs[order, 1], *drafts], dim=1)  # (R, k + 1), works' order: its last kept token first
        inputs = torch.empty(self.rows, k + 1, dtype=torch.long, device=device)
        inputs[order] = checked
        logits = self.target.step(inputs, self.batch).float().index_select(0, order)  # (R, k + 1, V)
        p_scores = [self._processed(works, logits[:, j], [length + j for length in lengths]) for j in range(k + 1)]
        tokens, accepted = self._verify(works, checked[:, 1:], p_scores, q_scores)
        counts = accepted.tolist()  # the round's one wait for the device
        over = []
        for i, (work, fits) in enumerate(zip(works, room)):
            kept = min(counts[i], fits)
            work.speculative.count(fits, kept)
            self.stats.count(fits, kept)
            if self._take(work, tokens[i : i + 1], [p[i : i + 1] for p in p_scores], kept):
                over.append(work)
        held = [work.search.length - 1 for work in works]  # the target holds every kept token but the last
        self.batch.cut_back(self._in_rows(order, torch.tensor(held, device=device)), max(held))
        return over

    def fail(self, error: Exception) -> list[Work]:
        """Every request here failed with `error` (a round that raised); they leave at the next boundary."""
        for work in self.works:
            work.done = True
            fail(work.answer, error=error)
        return list(self.works)

    def _in_rows(self, order: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """values (R,) in the works' order -> in the batch's row order."""
        out = torch.empty_like(values)
        out[order] = values
        return out

    def _processed(self, works: list[Work], logits: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """logits (R, V) of the works' rows -> each through its request's processors over the tokens before it
        (its first `lengths` tokens: the kept ones and its drafts); rows without processors as they are."""
        if not any(work.search.chain for work in works):
            return logits
        rows = []
        for i, (work, length) in enumerate(zip(works, lengths)):
            search, row = work.search, logits[i : i + 1]
            history = search.seqs[:, : min(length, search.max_length)]
            rows.append(apply_all(search.chain, history, row) if search.chain else row)
        return torch.cat(rows)

    def _chosen(self, works: list[Work], scores: torch.Tensor) -> torch.Tensor:
        """(R,) each row's draft token from its processed draft scores (R, V): the greedy rows' by one argmax, a
        sampling row's drawn with its request's generator (speculative.draft_tokens)."""
        tokens = argmax(scores)
        for i, work in enumerate(works):
            if work.search.cfg.do_sample:
                tokens[i] = draft_tokens(scores[i : i + 1], work.search.cfg, work.search.generator)[0]
        return tokens

    def _verify(self, works, drafts, p_scores, q_scores) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's round tokens (R, k + 1) and accepted count (R,) (speculative.verify): every greedy row in
        one call, each sampling row with its request's generator."""
        greedy = next((work.search.cfg for work in works if not work.search.cfg.do_sample), None)
        if greedy is not None:
            tokens, accepted = verify(drafts, p_scores, q_scores, greedy, None)
        else:
            tokens = torch.empty_like(torch.cat((drafts, drafts[:, :1]), dim=1))
            accepted = torch.empty(drafts.shape[0], dtype=torch.long, device=drafts.device)
        for i, work in enumerate(works):
            cfg = work.search.cfg
            if cfg.do_sample:
                one = slice(i, i + 1)
                p, q = [s[one] for s in p_scores], [s[one] for s in q_scores]
                tokens[one], accepted[one] = verify(drafts[one], p, q, cfg, work.search.generator)
        return tokens, accepted

    def _take(self, work: Work, tokens: torch.Tensor, p_scores: list[torch.Tensor], kept: int) -> bool:
        """The request's search takes its `kept` accepted drafts and the target's token after them (1, kept + 1)
        of `tokens`; True once it is over (its answer set), or its streamer failed (its answer that error)."""
        search = work.search
        try:
            for j in range(kept + 1):
                if search.steps is not None:
                    search.steps.append(p_scores[j])
                if search.take(tokens[:, j]):
                    break
        except Exception as error:  # a streamer that failed: this request alone
            work.done = True
            fail(work.answer, error=error)
            return True
        if search.result is None:
            return False
        work.done = True
        result = search.result
        work.answer.set_result(GenerateOutput(result.sequences, result.scores, speculative=work.speculative))
        return True
