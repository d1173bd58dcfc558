"""The greedy rows of a server's running batch, searched on the model's device: every row's next token, its
EOS and length limits and its padding after EOS chosen by a fixed number of tensor operations over all rows
at once, so a step's Python does not grow with the rows; Python touches only the rows that join or finish.

    rows = GreedyRows(device)
    rows.join(placed, jobs)           # each greedy request's one row: its limits, its decoder-start token
    logits = model.step(rows.inputs[:n, None], batch)
    over, lengths = rows.advance(logits, n).tolist()  # the rows whose search is over (one copy to the host)
    out = rows.output(row, length)    # (1, L) its tokens, as `generate` returns them
    rows.move(dst, src)               # as the batch moves its rows (RunningBatch.remove)

A row's search is `generate`'s greedy SampleSearch (generation.search) written for many rows: its scores
the step's logits through the processors `served_here` admits (min_new_tokens, a forced first and last
token), the argmax, the pad token once the row has produced EOS, stopped at EOS or max_new_tokens; so its
tokens are those of `generate` on its input alone. A request that asks for more (sampling, another
processor, stop strings, output_scores, several rows, a decoder prefix, more than WIDEST tokens) runs its
own SampleSearch, as before.

`inputs` (C,) holds the next input token of every row of the batch, these rows' and the others' (which the
scheduler writes there): one tensor a step reads.

Shapes: C rows of room (the batch's capacity), W columns of room, E EOS ids per row, V vocabulary.
"""

from __future__ import annotations

import math

import torch

from encdec.generation.generate import Prepared
from encdec.generation.logits_processors import build_processors
from encdec.generation.search import argmax

WIDEST = 4096  # the longest output (decoder-start token included) a row searched here holds

ROW_TENSORS = (
    "seqs",
    "length",
    "max_length",
    "min_length",
    "eos",
    "eos_columns",
    "pad",
    "ended",
    "member",
    "bos",
    "last",
)
NEVER = 1 << 62  # a length no row reaches
NOT_A_ROW = {"length": 0, "max_length": NEVER, "min_length": 0, "eos": -1, "eos_columns": 0, "bos": -1, "last": -1}
NOT_A_ROW |= {"ended": False, "member": False}


def served_here(job: Prepared) -> bool:
    """Whether `job` (a greedy request, generate's Prepared) is searched here: one row, no decoder prefix,
    no stop strings or output_scores, and no processor but min_new_tokens and the forced first and last
    tokens (counted against the processors generate would build, so a processor added there is never
    skipped here)."""
    cfg = job.cfg
    if cfg.do_sample or cfg.num_beams > 1 or job.rows != 1 or job.prompt.shape[1] != 1:
        return False
    if job.stop is not None or cfg.output_scores or cfg.max_new_tokens + 1 > WIDEST:
        return False
    handled = (cfg.min_new_tokens > 0 and bool(cfg.eos_ids)) + (cfg.forced_bos_token_id is not None)
    handled += cfg.forced_eos_token_id is not None
    return len(build_processors(cfg, cfg.max_new_tokens + 1)) == handled


class GreedyRows:
    """The per-row search state of a running batch's greedy rows, on `device` (see the module). A row that is
    not a greedy row holds NOT_A_ROW's values: never banned, forced, ended or over, its length kept at 0."""

    def __init__(self, device: torch.device):
        self.device = device
        self.capacity, self.width, self.eos_width = 0, 0, 1
        long = lambda *shape: torch.zeros(shape, dtype=torch.long, device=device)  # noqa: E731
        self.inputs = long(0)  # (C,) every row's next input token
        self.seqs = long(0, 0)  # (C, W) each row's tokens so far, decoder-start token first
        self.length = long(0)  # (C,) tokens written
        self.max_length = long(0)  # (C,) 1 + max_new_tokens
        self.min_length = long(0)  # (C,) EOS banned while length < this (0 without EOS)
        self.eos = long(0, 1)  # (C, E) EOS ids, padded with the first (-1 for a row without EOS)
        self.eos_columns = long(0, 1)  # (C, E) the same, 0 for -1: the scores min_new_tokens bans
        self.pad = long(0)  # (C,) the pad token after EOS
        self.bos = long(0)  # (C,) the token forced at length 1, or -1
        self.last = long(0)  # (C,) the token forced at length max_length - 1, or -1
        self.ended = torch.zeros(0, dtype=torch.bool, device=device)  # (C,) EOS produced
        self.member = torch.zeros(0, dtype=torch.bool, device=device)  # (C,) a greedy row searched here
        self.tokens = long(0)  # (n,) the tokens the last step chose (a streamer's)
        self.banning = self.forcing = False  # a row with min_new_tokens / a forced token joined since empty

    def reserve(self, capacity: int) -> None:
        """Room for `capacity` rows (the batch's), the rows held kept."""
        if capacity > self.capacity:
            self._resize(capacity, self.width, self.eos_width)

    def join(self, rows: list[int], jobs: list[Prepared]) -> None:
        """Rows `rows` become the rows of greedy requests `jobs` (one each, served_here), at their decoder-start
        token; a handful of tensor writes for all of them."""
        cfgs = [job.cfg for job in jobs]
        eos_width = max([self.eos_width, *(len(cfg.eos_ids) for cfg in cfgs)])
        width = max([self.width, *(cfg.max_new_tokens + 1 for cfg in cfgs)])
        if width > self.width or eos_width > self.eos_width:
            self._resize(self.capacity, max(width, min(2 * self.width, WIDEST)), eos_width)
        at = torch.tensor(rows, device=self.device)
        eos = [(cfg.eos_ids or [-1]) for cfg in cfgs]
        values = {
            "max_length": [cfg.max_new_tokens + 1 for cfg in cfgs],
            "min_length": [1 + cfg.min_new_tokens if cfg.eos_ids else 0 for cfg in cfgs],
            "pad": [cfg.pad_token_id if cfg.eos_ids else 0 for cfg in cfgs],
            "bos": [-1 if cfg.forced_bos_token_id is None else cfg.forced_bos_token_id for cfg in cfgs],
            "last": [-1 if cfg.forced_eos_token_id is None else cfg.forced_eos_token_id for cfg in cfgs],
            "eos": [ids + ids[:1] * (self.eos_width - len(ids)) for ids in eos],
            "length": [1] * len(rows),
            "ended": [False] * len(rows),
            "member": [True] * len(rows),
        }
        self.banning = self.banning or any(m > 1 for m in values["min_length"])
        self.forcing = self.forcing or any(b >= 0 for b in values["bos"] + values["last"])
        for name, column in values.items():
            getattr(self, name)[at] = torch.tensor(column, device=self.device)
        self.eos_columns[at] = self.eos[at].clamp(min=0)
        start = torch.cat([job.prompt[:, 0] for job in jobs])  # (n,) each one's decoder-start token
        self.seqs[at, 0] = start
        self.inputs[at] = start

    def leave(self, rows: torch.Tensor | slice) -> None:
        """Rows `rows` are no longer greedy rows (their requests are over, or the batch's rows moved away)."""
        for name, value in NOT_A_ROW.items():
            getattr(self, name)[rows] = value

    def move(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Row dst[i] takes row src[i]'s state, as the batch moves its rows."""
        self.inputs[dst] = self.inputs[src]
        for name in ROW_TENSORS:
            tensor = getattr(self, name)
            tensor[dst] = tensor[src]

    def advance(self, logits: torch.Tensor, n: int) -> torch.Tensor:
        """One step of every greedy row among the batch's first `n` from `logits` (n, V), which it changes (the
        other rows' only where NOT_A_ROW says nothing is banned): each next token chosen and written, every
        row's next input set (the scheduler writes the other rows' before the next step); (2, k) on the
        host: the rows whose search is now over and their lengths. About twenty tensor operations, whatever `n`."""
        length = self.length[:n]
        if self.banning:  # min_new_tokens: EOS at -inf while too short (gathered, banned, scattered back)
            columns = self.eos_columns[:n]
            banned = (length < self.min_length[:n])[:, None]
            logits.scatter_(1, columns, logits.gather(1, columns).masked_fill(banned, -math.inf))
        tokens = argmax(logits)
        if self.forcing:  # forced_bos_token_id at length 1, forced_eos_token_id at max_length - 1
            tokens = torch.where((length == 1) & (self.bos[:n] >= 0), self.bos[:n], tokens)
            tokens = torch.where((length == self.max_length[:n] - 1) & (self.last[:n] >= 0), self.last[:n], tokens)
        ended = self.ended[:n]
        tokens = torch.where(ended, self.pad[:n], tokens)  # a row past its EOS: the pad token
        self.seqs[:n].scatter_(1, length[:, None], tokens[:, None])  # a greedy row's length < max_length <= W
        length += self.member[:n]
        ended |= (tokens[:, None] == self.eos[:n]).any(-1)
        self.inputs[:n] = tokens
        self.tokens = tokens
        over = (ended | (length >= self.max_length[:n])).nonzero().view(-1)  # the one wait for the device
        return torch.stack((over, length[over])).cpu()  # and one copy: (2, k) those rows, their lengths

    def output(self, row: int, length: int) -> torch.Tensor:
        """(1, length) the tokens of row `row` (its length as `advance` said), decoder-start token first."""
        return self.seqs[row : row + 1, :length].clone()

    def trim(self) -> None:
        """Once the batch is empty: the buffers given back."""
        self._resize(0, 0, 1)
        self.banning = self.forcing = False

    def _resize(self, capacity: int, width: int, eos_width: int) -> None:
        """Buffers of `capacity` rows, `width` columns and `eos_width` EOS ids, what they held kept where it fits
        (a row's EOS ids padded with its first again), new rows NOT_A_ROW."""
        kept, columns, ids = min(capacity, self.capacity), min(width, self.width), min(eos_width, self.eos_width)
        for name in ("inputs", *ROW_TENSORS):
            old = getattr(self, name)
            shape = (capacity, width) if name == "seqs" else (capacity, eos_width) if "eos" in name else (capacity,)
            new = old.new_full(shape, NOT_A_ROW.get(name, 0))
            if name == "seqs":
                new[:kept, :columns] = old[:kept, :columns]
            elif "eos" in name:
                new[:kept] = old[:kept, :1]
                new[:kept, :ids] = old[:kept, :ids]
            else:
                new[:kept] = old[:kept]
            setattr(self, name, new)
        self.capacity, self.width, self.eos_width = capacity, width, eos_width
