"""Speculative rounds over rows that each keep their own count of accepted drafts: what `generate` with a draft
(generation.speculative) and a server's speculating rows (serving.speculative_rows) both run.

    rows = SpeculativeBatch(target, draft, k, ahead)          # draft: speculative.check_pair's
    placed = rows.join(target_state, draft_state, copies)     # begun (a decoder prefix stepped), one row a search
    out = rows.round(searches, at)                            # every row: n drafts, one check of n + 1 positions
    over = take(searches[i], out, i)                          # each search takes its kept drafts and one token
    rows.cut_back(searches, at)                               # each row's caches cut back to its own kept length
    moved = rows.remove(done_rows)                            # rows over leave; the last rows take their places

Each row is a search of its own (generate's SampleSearch of one row: its processors, stop test, limits and
streamer), at a length of its own, and a row of two running batches (encdec.modules.running_batch), the
target's and the draft's, the same rows in the same order; `at[i]` is search i's row. A round of R rows is n
steps of the draft, one position a row (its first step two: the row's last two kept tokens, since a row that
kept all its drafts has fed neither its last draft nor the target's token to the draft), then ONE step of the
target over n + 1 positions a row (its last kept token and its n drafts, each row from its own column), then
the acceptance rules (speculative.draft_tokens, speculative.verify: the greedy rows in one call, the sampling
rows in one call per generator, generate's rows sharing one, a server's requests each their own) give each row
its own count a of accepted drafts and the target's token after them. Rows advance by different amounts, and
each row's caches are cut back to its own kept length (RunningBatch.cut_back: the target's to every kept
token but the last, the draft's to all but the last two before the next round). So a greedy row's tokens are
plain greedy's on its input alone and a sampled row's are distributed as plain sampling's, whatever the
others accept.

n is the most drafts any row has room for (k, or fewer within k tokens of a row's max_new_tokens): a row with
less room steps n + 1 positions too, its columns past its room cut back, where the models' position tables
reach k columns past its end (`ahead`; a server speculates only requests for which they do); where they do
not (generate, a model of learned positions near its limit), n is the least any row has room for. The
processors see each row's own tokens: those of rows at one length under one chain (generate's rows) in one
call, the others row by row.

Shapes: R rows, n drafts a round, L a row's tokens so far, V vocabulary.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from encdec.errors import ConfigError
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.logits_processors import apply_all
from encdec.generation.search import SampleSearch, argmax
from encdec.generation.speculative import Draft, SpeculativeStats, draft_tokens, verify
from encdec.modules import DecodeState, RunningBatch

log = logging.getLogger(__name__)


@dataclass
class Proposals:
    """A round's outcome, in the searches' order: each row's accepted drafts then the target's token (R, n + 1),
    how many drafts each kept and could have kept (its room), and the target's processed scores at n + 1
    positions (R, V) each."""

    tokens: torch.Tensor
    kept: list[int]
    drafted: list[int]
    p_scores: list[torch.Tensor]


class SpeculativeBatch:
    """The target's and the draft's running batches of speculating rows (see the module). `draft` is
    speculative.check_pair's, `k` the drafts a round, `ahead` whether the position tables reach k columns past
    every row's end."""

    def __init__(self, target, draft: Draft, k: int, ahead: bool = True):
        like = next(target.parameters())
        self.target, self.draft, self.k, self.ahead = target, draft, k, ahead
        self.batch = RunningBatch(like.device, like.dtype)  # the target's rows
        self.drafts = RunningBatch(like.device, like.dtype)  # the draft's, the same rows in the same order

    @property
    def rows(self) -> int:
        return self.batch.rows

    def join(self, target_state: DecodeState, draft_state: DecodeState, copies: list[int]) -> list[range]:
        """Each example of the two states (begun together, aligned, their prefix but its last token stepped) as
        `copies[b]` rows of both batches; returns each example's rows."""
        placed = self.batch.join(target_state, copies)
        self.drafts.join(draft_state, copies)
        return placed

    def remove(self, rows: list[int]) -> dict[int, int]:
        """Free `rows` in both batches; returns {old row: new row} of the rows that moved into their places."""
        moved = self.batch.remove(rows)
        self.drafts.remove(rows)
        return moved

    def round(self, searches: list[SampleSearch], at: list[int]) -> Proposals:
        """One round of every row (see the module): searches[i] of one row, at batch row at[i]; every row of the
        batch is among them. The searches take nothing: `take` does, then `cut_back`."""
        k, device = self.k, self.batch.device
        order = torch.tensor(at, device=device)  # the rows, in the searches' order
        lengths = [search.length for search in searches]
        room = [min(k, search.max_length - length - 1) for search, length in zip(searches, lengths)]
        n = min(k, max(room) if self.ahead else min(room))
        seqs = [search.seqs for search in searches]
        last = torch.cat([s[:, length - 1] for s, length in zip(seqs, lengths)])  # (R,) each row's last kept token
        drafts, q_scores = self._drafts(searches, order, lengths, room, last, n)
        checked = torch.stack([last, *drafts], dim=1)  # (R, n + 1), searches' order
        inputs = torch.empty(self.rows, n + 1, dtype=torch.long, device=device)
        inputs[order] = checked
        logits = self.target.step(inputs, self.batch).float().index_select(0, order)  # (R, n + 1, V)
        p_scores = [self._processed(searches, logits[:, j], lengths, room, j) for j in range(n + 1)]
        tokens, accepted = self._verify(searches, checked[:, 1:], p_scores, q_scores)
        counts = accepted.tolist()  # the round's one wait for the device
        drafted = [min(fits, n) for fits in room]
        return Proposals(tokens, [min(a, fits) for a, fits in zip(counts, drafted)], drafted, p_scores)

    def cut_back(self, searches: list[SampleSearch], at: list[int]) -> None:
        """After the searches took their tokens: the target's caches of each row cut back to every kept token but
        the last (the draft's are cut at the next round's start)."""
        held = [search.length - 1 for search in searches]
        self.batch.cut_back(self._in_rows(at, torch.tensor(held, device=self.batch.device)), max(held))

    def _drafts(self, searches, order, lengths, room, last, n) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The draft's n proposals (R,) a step and its processed scores (R, V) at each, each row from its own
        column; a draft that processors read back (their history) written past its search's length. The first
        step runs where n is 0 too: it feeds the draft each row's last two kept tokens, which its next round's
        cut back takes as held."""
        device = self.batch.device
        at = torch.tensor(lengths, device=device)
        fresh = at == 1  # rows at their decoder-start token alone: their draft cache holds nothing
        seqs = [search.seqs for search in searches]
        inputs = torch.empty(self.rows, 2, dtype=torch.long, device=device)  # each row's last two tokens
        inputs[order, 0] = torch.cat([s[:, max(length - 2, 0)] for s, length in zip(seqs, lengths)])
        inputs[order, 1] = last
        self.drafts.cut_back(self._in_rows(order, (at - 2).clamp(min=0)), max(max(lengths) - 2, 0))
        logits = self.draft.model.step(inputs, self.drafts).float()  # (R, 2, V)
        logits = torch.where(fresh[:, None], logits[order, 0], logits[order, 1])  # (R, V), searches' order
        self.drafts.cut_back(self._in_rows(order, at), max(lengths))
        drafts, q_scores = [], []
        processed = any(search.chain for search in searches)
        for j in range(n):
            if j:
                step = torch.empty(self.rows, 1, dtype=torch.long, device=device)
                step[order, 0] = drafts[-1]
                logits = self.draft.model.step(step, self.drafts)[:, -1].float().index_select(0, order)
            scores = self._processed(searches, logits, lengths, room, j)
            tokens = self._chosen(searches, scores)
            if processed:
                for i, (s, length, fits) in enumerate(zip(seqs, lengths, room)):
                    if j < fits:
                        s[:, length + j] = tokens[i : i + 1]
            drafts.append(tokens)
            q_scores.append(scores)
        return drafts, q_scores

    def _in_rows(self, order, values: torch.Tensor) -> torch.Tensor:
        """values (R,) in the searches' order -> in the batch's row order."""
        if not isinstance(order, torch.Tensor):
            order = torch.tensor(order, device=values.device)
        out = torch.empty_like(values)
        out[order] = values
        return out

    def _processed(self, searches, logits: torch.Tensor, lengths, room, j: int) -> torch.Tensor:
        """logits (R, V) at each row's j-th position of the round -> through its search's processors over the
        tokens before it (its kept ones and its first j drafts, no more than its room: a row past its room is
        cut back, its scores unread); the rows of one chain and one length in one call."""
        if not any(search.chain for search in searches):
            return logits
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (search, length, fits) in enumerate(zip(searches, lengths, room)):
            if search.chain:
                groups.setdefault((id(search.chain), length + min(j, fits)), []).append(i)
        out = logits.clone()
        for (_, length), rows in groups.items():
            chain = searches[rows[0]].chain
            history = torch.cat([searches[i].seqs[:, :length] for i in rows])
            index = torch.tensor(rows, device=logits.device)
            out[index] = apply_all(chain, history, logits.index_select(0, index))
        return out

    def _chosen(self, searches, scores: torch.Tensor) -> torch.Tensor:
        """(R,) each row's draft token from the processed draft scores (R, V): the greedy rows' by one argmax,
        the sampling rows' drawn from q, one draw per generator (speculative.draft_tokens)."""
        tokens = argmax(scores)
        for rows, cfg, generator in sampling_groups(searches):
            index = torch.tensor(rows, device=scores.device)
            tokens[index] = draft_tokens(scores.index_select(0, index), cfg, generator)
        return tokens

    def _verify(self, searches, drafts, p_scores, q_scores) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's round tokens (R, n + 1) and accepted count (R,) (speculative.verify): the greedy rows in one
        call, the sampling rows in one per generator."""
        greedy = next((search.cfg for search in searches if not search.cfg.do_sample), None)
        if greedy is not None:
            tokens, accepted = verify(drafts, p_scores, q_scores, greedy, None)
        else:
            R, n = drafts.shape
            tokens = torch.empty(R, n + 1, dtype=torch.long, device=drafts.device)
            accepted = torch.empty(drafts.shape[0], dtype=torch.long, device=drafts.device)
        for rows, cfg, generator in sampling_groups(searches):
            index = torch.tensor(rows, device=drafts.device)
            p, q = [s.index_select(0, index) for s in p_scores], [s.index_select(0, index) for s in q_scores]
            tokens[index], accepted[index] = verify(drafts.index_select(0, index), p, q, cfg, generator)
        return tokens, accepted


def sampling_groups(searches: list[SampleSearch]) -> list[tuple[list[int], object, torch.Generator | None]]:
    """The sampling searches by generator: (their indices, a config, the generator), one group a generator."""
    groups: dict[int, tuple[list[int], object, torch.Generator | None]] = {}
    for i, search in enumerate(searches):
        if search.cfg.do_sample:
            groups.setdefault(id(search.generator), ([], search.cfg, search.generator))[0].append(i)
    return list(groups.values())


def take(search: SampleSearch, out: Proposals, i: int) -> bool:
    """Search i (of one row) takes its accepted drafts and the target's token after them (their scores where
    output_scores asks); True once it is over (its result set)."""
    for j in range(out.kept[i] + 1):
        if search.steps is not None:
            search.steps.append(out.p_scores[j][i : i + 1])
        if search.take(out.tokens[i : i + 1, j]):
            break
    return search.result is not None


def speculative_search(target, job) -> GenerateOutput:
    """Greedy or sampled decoding of generate's `job` (its `draft` set) by rounds of draft-then-verify, each row a
    search of its own that keeps its own count of accepted drafts (see the module); the rows over leave the
    batch, the output is theirs padded to the longest, as plain greedy's pads a row after its EOS."""
    cfg, draft, k = job.cfg, job.draft, job.cfg.num_assistant_tokens
    prompt = job.prompt.repeat_interleave(job.rows, 0)  # (R, P)
    R, P = prompt.shape
    if cfg.streamer is not None and R > 1:
        raise ConfigError(
            f"speculative decoding streams one row ({R} here): each row keeps its own accepted drafts, so a step "
            "has no token for every row; give one input and one sequence, or leave out the streamer"
        )
    capacity = cfg.max_new_tokens + P - 1
    target_state, draft_state = start_both(target, draft, job, capacity)
    rows = SpeculativeBatch(target, draft, k, ahead=reaches(target, draft, job.src_ids, capacity + k))
    rows.join(target_state, draft_state, [job.rows] * job.prompt.shape[0])
    searches = [SampleSearch(prompt[i : i + 1], cfg, job.device, job.stop) for i in range(R)]
    for search in searches[1:]:  # one generator and one chain of processors: the rows' draws and calls batched
        search.generator, search.chain = searches[0].generator, searches[0].chain
    live, at, stats = list(range(R)), list(range(R)), SpeculativeStats()  # the searches running; each one's row
    while live:
        running = [searches[i] for i in live]
        out = rows.round(running, [at[i] for i in live])
        over = []
        for j, i in enumerate(live):
            stats.count(out.drafted[j], out.kept[j])
            if take(searches[i], out, j):
                over.append(i)
        rows.cut_back(running, [at[i] for i in live])
        if over:
            moved = rows.remove([at[i] for i in over])
            live = [i for i in live if i not in over]
            at = [moved.get(row, row) for row in at]
    log.info("%s", stats)
    return padded(searches, cfg, stats)


def start_both(target, draft: Draft, job, capacity: int) -> tuple[DecodeState, DecodeState]:
    """The target's and the draft's decode states for generate's `job`, one row an example: the target's encoder
    run once, the draft's too unless it reads the target's; a decoder prefix but its last token stepped (a round
    reads each row's last kept token anew)."""
    target.check_lengths(job.src_ids, capacity)
    draft.model.check_lengths(job.src_ids, capacity)
    memory = target.encode(job.src_ids, job.src_mask)
    own = memory if draft.shares_encoder else draft.model.encode(job.src_ids, job.src_mask)
    states = target.begin(memory, capacity), draft.model.begin(own, capacity)
    if job.prompt.shape[1] > 1:
        target.step(job.prompt[:, :-1], states[0])
        draft.model.step(job.prompt[:, :-1], states[1])
    return states


def reaches(target, draft: Draft, src_ids: torch.Tensor, columns: int) -> bool:
    """Whether both models' position tables reach `columns` decoded columns (a round's k columns past a row's
    end: see the module)."""
    try:
        for model in (target, draft.model):
            model.check_lengths(src_ids, columns)
    except ConfigError:
        return False
    return True


def padded(searches: list[SampleSearch], cfg, stats: SpeculativeStats) -> GenerateOutput:
    """The searches' outputs as one (R, L): each row padded with the pad token past its end, as plain decoding
    pads a row after its EOS; its scores there (output_scores) the pad token's, certain (0, the rest -inf)."""
    results = [search.result for search in searches]
    width = max(result.sequences.shape[1] for result in results)
    first = results[0].sequences
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    sequences = torch.full((len(results), width), pad, dtype=first.dtype, device=first.device)
    for i, result in enumerate(results):
        sequences[i, : result.sequences.shape[1]] = result.sequences[0]
    scores = None
    if cfg.output_scores:
        V = results[0].scores[0].shape[1] if results[0].scores else 0
        filler = torch.full((1, V), -math.inf, device=first.device)
        filler[0, pad] = 0.0
        prompt = width - max(len(result.scores) for result in results)
        scores = tuple(
            torch.cat([r.scores[t] if t < len(r.scores) else filler for r in results]) for t in range(width - prompt)
        )
    return GenerateOutput(sequences, scores, speculative=stats)
