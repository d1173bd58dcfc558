"""A server's running batch: a decode state whose rows join (`join`: the examples a `start` made, each as
its beams' or samples' rows) and leave (`remove`) between steps, each row at a position of its own.

    batch = RunningBatch("cpu", torch.float32)
    rows = batch.join(model.start(src_ids, src_mask, max_new_tokens), copies)   # each example's rows
    logits = model.step(tokens, batch)                                          # every row one column on
    batch.reorder_rows(rows, order); moved = batch.remove(done_rows)

The rows' caches are moved through the state's bag (encdec.modules.layer_caches), each by its own kind's
rule. In the batch every row has its own memory row (groups 1): requests of different numbers of beams sit
side by side, and a step's cross-attention reads one memory row per query row.

Shapes: R rows, K kv heads, L columns held, S memory width, D head dim.
"""

from __future__ import annotations

import torch

from encdec.modules.attention import blocked_value
from encdec.modules.decode_state import DecodeState
from encdec.modules.layer_caches import StateBag

ROW_TENSORS = ("lengths", "pad", "source_lengths", "next_input", "substitute")  # (R,) each, where present


class RunningBatch(DecodeState):
    """An empty running batch on `device`: rows join it (`join`) and leave it (`remove`)."""

    def __init__(self, device: torch.device | str, dtype: torch.dtype):
        super().__init__(0, 1, device, dtype)
        self.aligned = False
        self.source_widths = torch.zeros(0, dtype=torch.long, device=self.device)  # (R,) each row's memory width

    def trim(self) -> None:
        """Once every row has left: every buffer given back (the room a burst of long requests grew is not
        held by an idle server); the next join makes what it needs."""
        self.bag, self.memory_mask, self._layers = StateBag(), None, None
        self.capacity_rows, self.capacity, self.columns, self.memory_width = 0, 1, 0, 0
        self.lengths, self.source_widths = self.lengths[:0].clone(), self.source_widths[:0].clone()
        self.row_index, self.position = self.row_index[:0], self.lengths[:1]
        self.pad = self.source_lengths = self.next_input = self.substitute = None

    def join(self, other: DecodeState, copies: list[int]) -> list[range]:
        """Take `other`'s examples (a state `start` made for them, aligned) as new rows of this batch, example
        b as `copies[b]` rows (its beams or samples, each with a copy of its caches and memory). Returns
        each example's rows (they move when others leave: see `remove`)."""
        B = len(copies)
        per_example = other.rows // B  # rows `start` made per example
        pick = torch.arange(B, device=self.device) * per_example
        pick = pick.repeat_interleave(torch.tensor(copies, device=self.device))  # (n,) a row of `other` each
        first, n = self.rows, len(pick)
        self._grow(first + n, max(self.columns, other.columns) + 1, other)
        rows = slice(first, first + n)
        for mine, theirs in zip(self.bag, other.bag):
            mine.join(rows, theirs, pick)
        if other.memory:
            memory_rows = torch.div(pick, other.groups, rounding_mode="floor")  # the memory row of each new row
            S = other.memory_width
            self.memory_mask[rows] = blocked_value(self.dtype, self.device.type)
            self.memory_mask[rows, :, :, :S] = other.memory_mask[memory_rows] if other.memory_mask is not None else 0.0
            self.memory_width = max(self.memory_width, S)
            self.source_widths[rows] = S
        self.lengths[rows] = other.row_lengths()[pick]
        for name in ("pad", "source_lengths", "next_input"):
            theirs = getattr(other, name)
            if theirs is not None:
                self._row_tensor(name, theirs.dtype)[rows] = theirs[pick]
        if other.substitute is not None or other.next_input is not None:
            flags = self._row_tensor("substitute", torch.bool)
            flags[rows] = other.substitute[pick] if other.substitute is not None else False
        if other.kinds != self.kinds:  # the model's layer kinds, from its first request on
            self.kinds, self.kind_of_layer, self._bias_tables = other.kinds, other.kind_of_layer, {}
        self.rows += n
        self.columns = max(self.columns, other.columns)
        self._layers = None
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
            self.bag.move_rows(dst, src)
            for name in (*ROW_TENSORS, "memory_mask", "source_widths"):
                tensor = getattr(self, name)
                if tensor is not None:
                    tensor[dst] = tensor[src]
        self.rows = keep
        self._layers = None
        if keep == 0:
            self.trim()
        else:
            self.narrow()
        return dict(zip(movers, holes))

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

    def _row_tensor(self, name: str, dtype: torch.dtype) -> torch.Tensor:
        tensor = getattr(self, name)
        if tensor is None:
            tensor = torch.zeros(self.capacity_rows, dtype=dtype, device=self.device)
            setattr(self, name, tensor)
        return tensor

    def _grow(self, rows: int, columns: int, like: DecodeState) -> None:
        """Room for `rows` rows of `columns` columns, and for `like`'s caches and memory (buffers doubled as
        outgrown)."""
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
            self._grow_memory(new_R, like)

    def _grow_memory(self, rows: int, like: DecodeState) -> None:
        """Per-row memory buffers of `rows` rows and at least like's width, and their mask (doubled as
        outgrown)."""
        width = max(like.memory_width, self.memory_width)
        have = self.memory[0].values.shape if self.memory else None
        if have is not None and have[0] >= rows and have[2] >= width:
            return
        S = max(width, 2 * have[2]) if have is not None and width > have[2] else (have[2] if have else width)
        if self.memory:
            for cache in self.memory:
                cache.resize(rows, S)
        else:
            self.bag.memory = [theirs.blank(self, rows, S) for theirs in like.memory]
        mask = torch.full(
            (rows, 1, 1, S), blocked_value(self.dtype, self.device.type), dtype=self.dtype, device=self.device
        )
        kept = self.rows
        if self.memory_mask is not None:
            mask[:kept, :, :, : self.memory_width] = self.memory_mask[:kept, :, :, : self.memory_width]
        self.memory_mask = mask
        self._layers = None
