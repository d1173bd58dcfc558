"""A server's running batch: a decode state whose rows join (`join`: the examples a `start` made, each as
its beams' or samples' rows) and leave (`remove`) between steps, each row at a position of its own.

    batch = RunningBatch("cpu", torch.float32)
    rows = batch.join(model.start(src_ids, src_mask, max_new_tokens), copies)   # each example's rows
    logits = model.step(tokens, batch)                                          # every row t columns on
    batch.cut_back(lengths, widest)                                             # each row its own columns kept
    batch.reorder_rows(rows, order); moved = batch.remove(done_rows)
    batch.hold(rows)                                                            # their columns stop growing

The rows' caches are moved through the state's bag (encdec.modules.layer_caches), each by its own kind's
rule. In the batch each joined example holds one memory row (its cross-attention keys and values), shared by
its rows (its beams or samples): requests of different numbers of rows sit side by side, so a step's
cross-attention reads each memory row once for all its rows (`memory_readers`: each memory row's first
row in one pass, the other rows of the memory rows shared folded as query groups in a second).

Shapes: R rows, K kv heads, L columns held, S memory width, D head dim.
"""

from __future__ import annotations

from functools import partial

import torch

from encdec.modules.attention import MemoryReaders, blocked_value
from encdec.modules.decode_state import DecodeState
from encdec.modules.layer_caches import StateBag

ROW_TENSORS = ("lengths", "pad", "source_lengths", "next_input", "substitute", "moving")  # (R,) each, where present


class RunningBatch(DecodeState):
    """An empty running batch on `device`: rows join it (`join`) and leave it (`remove`)."""

    def __init__(self, device: torch.device | str, dtype: torch.dtype):
        super().__init__(0, 1, device, dtype)
        self.aligned = False
        self.source_widths = torch.zeros(0, dtype=torch.long, device=self.device)  # (R,) each row's memory width
        self.row_memory: list[int] = []  # host, per row: its memory row
        self.row_rank: list[int] = []  # host, per row: its place among its memory row's rows
        self.memory_users: list[int] = []  # host, per memory row: the rows that read it
        self.moving: torch.Tensor | None = None  # (R,) 1 for a row whose columns grow a step, 0 for one held

    @property
    def memory_rows(self) -> int:
        return len(self.memory_users)

    def trim(self) -> None:
        """Once every row has left: every buffer given back (the room a burst of long requests grew is not
        held by an idle server); the next join makes what it needs."""
        self.bag, self.memory_mask, self._layers = StateBag(), None, None
        self.capacity_rows, self.capacity, self.columns, self.memory_width = 0, 1, 0, 0
        self.lengths, self.source_widths = self.lengths[:0].clone(), self.source_widths[:0].clone()
        self.row_index, self.position = self.row_index[:0], self.lengths[:1]
        self.pad = self.source_lengths = self.next_input = self.substitute = self.moving = None
        self.row_memory, self.row_rank, self.memory_users = [], [], []
        self.memory_readers = None

    def join(self, other: DecodeState, copies: list[int]) -> list[range]:
        """Take `other`'s examples (a state `start` made for them, aligned) as new rows of this batch, example
        b as `copies[b]` rows (its beams or samples, each with a copy of its step caches, all reading one
        memory row). Returns each example's rows (they move when others leave: see `remove`)."""
        B = len(copies)
        per_example = other.rows // B  # rows `start` made per example
        pick = torch.arange(B, device=self.device) * per_example
        pick = pick.repeat_interleave(torch.tensor(copies, device=self.device))  # (n,) a row of `other` each
        first, n, first_memory = self.rows, len(pick), self.memory_rows
        self._grow(first + n, max(self.columns, other.columns) + 1, other, first_memory + B)
        rows = slice(first, first + n)
        for mine, theirs in zip(self.bag.step, other.bag.step):
            mine.join(rows, theirs, pick)
        if other.memory:
            examples = torch.div(torch.arange(B, device=self.device) * per_example, other.groups, rounding_mode="floor")
            memory, S = slice(first_memory, first_memory + B), other.memory_width  # one memory row an example
            for mine, theirs in zip(self.bag.memory, other.bag.memory):
                mine.join(memory, theirs, examples)
            self.memory_mask[memory] = blocked_value(self.dtype, self.device.type)
            self.memory_mask[memory, :, :, :S] = other.memory_mask[examples] if other.memory_mask is not None else 0.0
            self.memory_width = max(self.memory_width, S)
            self.source_widths[rows] = S
            self.row_memory += [first_memory + b for b, count in enumerate(copies) for _ in range(count)]
            self.row_rank += [rank for count in copies for rank in range(count)]
            self.memory_users += copies
        self.lengths[rows] = other.row_lengths()[pick]
        for name in ("pad", "source_lengths", "next_input"):
            theirs = getattr(other, name)
            if theirs is not None:
                self._row_tensor(name, theirs.dtype)[rows] = theirs[pick]
        if self.moving is not None:
            self.moving[rows] = 1
        if other.substitute is not None or other.next_input is not None:
            flags = self._row_tensor("substitute", torch.bool)
            flags[rows] = other.substitute[pick] if other.substitute is not None else False
        if other.kinds != self.kinds:  # the model's layer kinds, from its first request on
            self.kinds, self.kind_of_layer, self._bias_tables = other.kinds, other.kind_of_layer, {}
        self.rows += n
        self.columns = max(self.columns, other.columns)
        self._place_rows()
        return [range(first + sum(copies[:b]), first + sum(copies[: b + 1])) for b in range(B)]

    def remove(self, rows: list[int]) -> dict[int, int]:
        """Free `rows`; the last rows move into their places so the running rows stay a prefix. Returns
        {old row: new row} for the rows that moved."""
        gone = set(rows)
        keep = self.rows - len(gone)
        holes = sorted(r for r in gone if r < keep)
        movers = [r for r in range(keep, self.rows) if r not in gone]
        if holes:
            src, dst = torch.tensor(movers, device=self.device), torch.tensor(holes, device=self.device)
            for cache in self.bag.step:
                cache.move_rows(dst, src)
            for name in (*ROW_TENSORS, "source_widths"):
                tensor = getattr(self, name)
                if tensor is not None:
                    tensor[dst] = tensor[src]
        if self.memory_users:
            self._release_memory(gone, dict(zip(movers, holes)), keep)
        self.rows = keep
        self._layers = None
        if keep == 0:
            self.trim()
        else:
            self.narrow()
            self._place_rows()
        return dict(zip(movers, holes))

    def _release_memory(self, gone: set[int], moved: dict[int, int], keep: int) -> None:
        """The rows `gone` leave their memory rows, the rows `moved` {old: new} move: a memory row no row reads
        any more is freed, the last memory rows moving into the places freed (as rows do)."""
        users, row_memory, row_rank = self.memory_users, self.row_memory, self.row_rank
        for row in gone:
            users[row_memory[row]] -= 1
        for old, new in moved.items():
            row_memory[new], row_rank[new] = row_memory[old], row_rank[old]
        del row_memory[keep:], row_rank[keep:]
        kept = sum(1 for count in users if count)
        holes = [m for m in range(kept) if not users[m]]
        movers = [m for m in range(kept, len(users)) if users[m]]
        if holes:
            src, dst = torch.tensor(movers, device=self.device), torch.tensor(holes, device=self.device)
            for cache in self.bag.memory:
                cache.move_rows(dst, src)
            self.memory_mask[dst] = self.memory_mask[src]
            to = dict(zip(movers, holes))
            for m, n in to.items():
                users[n] = users[m]
            self.row_memory = [to.get(m, m) for m in row_memory]
        del users[kept:]

    def _place_rows(self) -> None:
        """Which rows read which memory row (`memory_readers`, attention.MemoryReaders): each memory row's
        first row, and the others at slots of the memory rows shared; None where row r reads memory row r (at
        128 rows, d_model 64, the gather and scatter of the queries cost 0.1 ms a step)."""
        self._layers = None
        if not self.memory_users:
            self.memory_readers = None
            return
        first = [-1] * len(self.memory_users)
        for row, (m, rank) in enumerate(zip(self.row_memory, self.row_rank)):
            if first[m] < 0 or rank < self.row_rank[first[m]]:
                first[m] = row
        if first == list(range(self.rows)):  # row r reads memory row r (greedy and sampling requests of one row)
            self.memory_readers = None  # a step reads the memory as generate's rows do: no gather, no scatter
            return
        tensor = partial(torch.tensor, device=self.device)
        readers = MemoryReaders(tensor(first), tensor(self.row_memory))
        if len(first) < self.rows:  # some memory rows read by more than one row
            others = [row for row in range(self.rows) if first[self.row_memory[row]] != row]
            shared = sorted({self.row_memory[row] for row in others})
            place = {m: i for i, m in enumerate(shared)}
            taken, at = [0] * len(shared), []  # rows placed per shared memory row; each other row's (i, rank)
            for row in others:
                i = place[self.row_memory[row]]
                at.append((i, taken[i]))
                taken[i] += 1
            G = max(taken)
            slots = [i * G + rank for i, rank in at]
            readers.others, readers.slots, readers.groups = tensor(others), tensor(slots), G
            readers.shared = tensor(shared) if len(shared) < len(first) else None
        self.memory_readers = readers

    def hold(self, rows: torch.Tensor) -> None:
        """Rows `rows` (R_h,) stop moving on: a step still computes them, but their columns no longer grow, each
        step writing over their last (at a position they took before). A finished request's rows wait so for the
        next `remove` of many rows together."""
        if self.moving is None:
            self.moving = torch.ones(self.capacity_rows, dtype=self.lengths.dtype, device=self.device)
        self.moving[rows] = 0
        self.lengths[rows] = (self.lengths[rows] - 1).clamp(min=0)

    def advance(self, t: int) -> None:
        """Every row has written t more columns, but the rows held (`hold`), which wrote over their last."""
        if self.moving is None:
            return super().advance(t)
        self.lengths[: self.rows].add_(self.moving[: self.rows], alpha=t)
        self.columns += t

    def cut_back(self, lengths: torch.Tensor, widest: int) -> None:
        """Row r keeps its first lengths[r] written columns (R,), forgetting those after (a served speculative
        round's rejected drafts, serving.speculative_rows): its next step writes over them, and the causal rule
        hides them until then. `widest`, the longest kept (the host knows it), is the batch's columns."""
        self.lengths[: self.rows] = torch.minimum(self.lengths[: self.rows], lengths)
        self.columns = widest

    def reorder_rows(self, rows: list[int], order: list[int]) -> None:
        """Row rows[i] takes the caches of rows[order[i]] (a served beam search's reorder, within a request)."""
        if order == list(range(len(order))):
            return
        dst = torch.tensor(rows, device=self.device)
        self.bag.reorder_rows(dst, dst[torch.tensor(order, device=self.device)])

    def narrow(self) -> None:
        """Once rows have left: the widest remaining row's columns and memory, learnt on the host (one sync)."""
        if self.rows == 0:
            self.columns, self.memory_width = 0, 0
            return
        widest = [self.lengths[: self.rows].max()]
        if self.memory:
            widest.append(self.source_widths[: self.rows].max())
        values = torch.stack(widest).tolist()
        self.columns = values[0]
        if self.memory:
            self.memory_width = values[1]
            self._fit_memory(self.memory_rows, self.memory_width)

    def _row_tensor(self, name: str, dtype: torch.dtype) -> torch.Tensor:
        tensor = getattr(self, name)
        if tensor is None:
            tensor = torch.zeros(self.capacity_rows, dtype=dtype, device=self.device)
            setattr(self, name, tensor)
        return tensor

    def _grow(self, rows: int, columns: int, like: DecodeState, memory_rows: int) -> None:
        """Room for `rows` rows of `columns` columns, and for `like`'s caches and `memory_rows` rows of its
        memory (buffers doubled as outgrown)."""
        R, L = self.capacity_rows, self.capacity
        new_R = max(rows, 2 * R) if rows > R else R
        new_L = max(columns, 2 * L) if columns > L else L
        if (new_R, new_L) != (R, L):
            for cache in self.bag.step:
                cache.resize(new_R, new_L)
            for name in (*ROW_TENSORS, "source_widths"):
                tensor = getattr(self, name)
                if tensor is not None:
                    grown = tensor.new_zeros(new_R, *tensor.shape[1:])
                    grown[: self.rows] = tensor[: self.rows]
                    setattr(self, name, grown)
            self.row_index = torch.arange(new_R, device=self.device)
            self.capacity_rows, self.capacity = new_R, new_L
        if not self.caches and like.caches:
            self.bag.step = [theirs.blank(self, new_R, new_L) for theirs in like.caches]
        if like.memory:
            self._grow_memory(memory_rows, like)

    def _grow_memory(self, needed: int, like: DecodeState) -> None:
        """Memory buffers of at least `needed` memory rows and like's width, and their mask."""
        width = max(like.memory_width, self.memory_width)
        if not self.memory:
            self.bag.memory = [theirs.blank(self, needed, width) for theirs in like.memory]
        self._fit_memory(needed, width)

    def _fit_memory(self, needed: int, width: int) -> None:
        """Memory buffers and mask of at least `needed` memory rows (doubled as outgrown) and exactly `width`
        source positions, what is held kept: a step's products read the held memory rows as one block (at 128
        rows, 32 of 64 positions, a narrower view of wider buffers took 127 against 87 us a layer), so the
        buffers are laid out again when the widest memory row joins or leaves, not read strided every step."""
        have = self.memory[0].values.shape
        rows = max(needed, 2 * have[0]) if needed > have[0] else have[0]
        if (rows, width) != (have[0], have[2]):
            for cache in self.memory:
                cache.resize(rows, width)
        elif self.memory_mask is not None:
            return
        mask = torch.full(
            (rows, 1, 1, width), blocked_value(self.dtype, self.device.type), dtype=self.dtype, device=self.device
        )
        kept, held = self.memory_rows, min(self.memory_width, width)
        if self.memory_mask is not None:
            mask[:kept, :, :, :held] = self.memory_mask[:kept, :, :, :held]
        self.memory_mask = mask
        self._layers = None
