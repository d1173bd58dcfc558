"""Each attention layer's decoding cache, one class per kind, all behind one protocol (`LayerState`), held
by the decode state's bag (`StateBag`, as fairseq2's IncrementalStateBag: each layer's own state).

    kind                                   class                 rows                 filled
    self-attention (every family's; a      SelfAttentionCache    R, one a row         a step's columns at a time
      sliding layer's too: its window is
      a mask rule, its keys the same)
    the research families' cross-attention SelfAttentionCache    R                    as the encoder advances
    cross-attention to an encoder output   CrossAttentionCache   M = R / groups       once, by `start`
    T5Gemma 2's merged self+cross          the pair of both (kv_cache.LayerCache): one attention reads its
                                           own keys (growing) beside the memory's (filled once, unrotated)

What the decode state asks of every layer's cache (the protocol): `append` (Attention's side), `reorder`
for beams, `repeat` rows for an example's beams or samples, `move_rows` / `join` / `reorder_rows` for a
server's running batch, `resize` (grow or trim its buffers), `blank` (one of the same layout, for a fixed-
shape state or a batch) and `load` (a fixed-shape state's start). A memory cache shares one memory row
between the `groups` rows of an example: beam moves leave it as it is, and nothing is repeated per beam.

A beam reorder gathers each growing cache's written columns into a spare pair of buffers of its shape, which
then becomes the cache, and hands the pair it no longer uses to the next layer: one spare pair for the whole
bag (layers + 1 pairs held, not 2 x layers), one read and one write of the written columns a layer, no
allocation after the first reorder.

Shapes: R rows, M memory rows, K kv heads, L columns held, S memory (source) length, D head dim.
"""

from __future__ import annotations

from typing import Protocol

import torch

from encdec.modules.kv_cache import StaticKVCache

Spare = tuple[torch.Tensor, torch.Tensor] | None  # keys and values buffers a reorder may gather into


class RowLayout(Protocol):
    """What a cache reads of the decode state it belongs to (encdec.modules.decode_state.DecodeState)."""

    rows: int  # R, the running rows
    capacity_rows: int  # rows the buffers hold
    capacity: int  # L, columns the buffers hold
    columns: int  # host: the columns the widest row has written
    aligned: bool  # every row at `columns`
    static: bool  # fixed shapes: the column is `position`, on the device
    position: torch.Tensor  # (1,)
    lengths: torch.Tensor  # (R,) columns each row has written
    row_index: torch.Tensor  # (R,) 0..R-1
    groups: int  # rows per memory row
    memory_rows: int  # M, the memory rows the rows read
    memory_width: int  # host: S, the widest memory row's length


class LayerState(Protocol):
    """One layer's decoding cache, as the decode state moves it (see the module)."""

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...
    def reorder(self, index: torch.Tensor, spare: Spare = None) -> Spare: ...  # keep rows index (R,) (see below)
    def repeat(self, n: int) -> None: ...  # each row n rows, example-major
    def reorder_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None: ...  # some rows, within their request
    def move_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None: ...  # rows leaving: others take their place
    def join(self, rows: slice, theirs: LayerState, pick: torch.Tensor) -> None: ...  # rows take theirs[pick]
    def resize(self, rows: int, columns: int) -> None: ...  # buffers of rows x columns, what is held kept
    def blank(self, state: RowLayout, rows: int, columns: int) -> LayerState: ...  # same layout, zeros
    def load(self, theirs: LayerState) -> None: ...  # a fixed-shape state's start: hold what theirs holds


class SelfAttentionCache:
    """One attention layer's keys and values of R rows (R, K, L, D), written at each row's next columns
    (Attention's cache protocol: `append` the new keys, get every key a query may read); the state says
    where (its mode, columns and rows)."""

    frozen = False

    def __init__(self, state: RowLayout):
        self.state = state
        self.keys: torch.Tensor | None = None  # (R, K, L, D), made at the first append
        self.values: torch.Tensor | None = None

    def allocate(self, rows: int, kv_heads: int, columns: int, d_head: int, like: torch.Tensor) -> None:
        """Zeroed buffers (rows, K, columns, D) of like's dtype and device: zeros are masked and finite."""
        self.keys = like.new_zeros(rows, kv_heads, columns, d_head)
        self.values = like.new_zeros(rows, kv_heads, columns, d_head)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (R, K, t, D) at each row's next t columns -> the keys and values a step reads (R, K, W, D)."""
        state = self.state
        if self.keys is None:
            self.allocate(state.capacity_rows, k.shape[1], state.capacity, k.shape[3], k)
        R, t = k.shape[0], k.shape[2]
        if state.static:
            self.keys.index_copy_(2, state.position, k)
            self.values.index_copy_(2, state.position, v)
            return self.keys, self.values
        if state.aligned:
            start = state.columns
            self.keys[:R, :, start : start + t] = k
            self.values[:R, :, start : start + t] = v
        elif t == 1:  # each row's key at its own column
            rows, at = state.row_index[:R], state.lengths[:R]
            self.keys[rows, :, at] = k[:, :, 0]
            self.values[rows, :, at] = v[:, :, 0]
        else:  # each row's t keys at its own next t columns (a served speculative round's check)
            rows = state.row_index[:R, None]  # (R, 1)
            at = state.lengths[:R, None] + torch.arange(t, device=k.device)  # (R, t)
            self.keys[rows, :, at] = k.transpose(1, 2)  # (R, t, K, D)
            self.values[rows, :, at] = v.transpose(1, 2)
        width = state.columns + t
        return self.keys[:R, :, :width], self.values[:R, :, :width]

    def reorder(self, index: torch.Tensor, spare: Spare = None) -> Spare:
        """Keep rows `index` (R,) of the written columns. In place in static mode (its buffers never move), else
        gathered into `spare` (made where None or of another shape), which becomes the cache; returns the pair
        it no longer uses (see the module: gathering into a temporary and copying it back read and wrote the
        columns twice, 68 against 41 us per layer's keys for 32 beams of 50 positions)."""
        if self.keys is None:
            return spare
        R, columns = index.shape[0], self.state.columns
        if self.state.static:
            for buf in (self.keys, self.values):
                buf[:R, :, :columns] = buf[:R, :, :columns].index_select(0, index)
            return spare
        if spare is None or spare[0].shape != self.keys.shape or spare[0].dtype != self.keys.dtype:
            spare = (torch.empty_like(self.keys), torch.empty_like(self.values))
        spare_k, spare_v = spare
        torch.index_select(self.keys[:R, :, :columns], 0, index, out=spare_k[:R, :, :columns])
        torch.index_select(self.values[:R, :, :columns], 0, index, out=spare_v[:R, :, :columns])
        freed = (self.keys, self.values)
        self.keys, self.values = spare_k, spare_v
        return freed

    def repeat(self, n: int) -> None:
        if self.keys is not None:
            rows = self.state.rows
            self.keys = self.keys[:rows].repeat_interleave(n, 0)
            self.values = self.values[:rows].repeat_interleave(n, 0)

    def reorder_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        self.move_rows(dst, src)

    def move_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Rows dst take rows src's written columns (gathered first: they may overlap; index_copy_, not an
        indexed assignment, which took twice as long)."""
        if self.keys is not None:
            columns = self.state.columns
            for buf in (self.keys, self.values):
                written = buf[:, :, :columns]
                written.index_copy_(0, dst, written.index_select(0, src))

    def join(self, rows: slice, theirs: SelfAttentionCache, pick: torch.Tensor) -> None:
        """Rows `rows` of this (a batch's) cache take theirs' rows `pick` (n,), their written columns."""
        if theirs.keys is None:
            return
        if self.keys is None:
            K, D = theirs.keys.shape[1], theirs.keys.shape[3]
            self.allocate(self.state.capacity_rows, K, self.state.capacity, D, theirs.keys)
        c = theirs.state.columns
        self.keys[rows, :, :c] = theirs.keys[pick, :, :c]
        self.values[rows, :, :c] = theirs.values[pick, :, :c]

    def resize(self, rows: int, columns: int) -> None:
        """New buffers of rows x columns, the state's rows and written columns kept (grown, or trimmed)."""
        if self.keys is None:
            return
        keep_rows, keep_columns = min(self.state.rows, rows), min(self.state.columns, columns)
        old_keys, old_values = self.keys, self.values
        self.allocate(rows, old_keys.shape[1], columns, old_keys.shape[3], old_keys)
        self.keys[:keep_rows, :, :keep_columns] = old_keys[:keep_rows, :, :keep_columns]
        self.values[:keep_rows, :, :keep_columns] = old_values[:keep_rows, :, :keep_columns]

    def blank(self, state: RowLayout, rows: int, columns: int) -> SelfAttentionCache:
        cache = SelfAttentionCache(state)
        if self.keys is not None:
            cache.allocate(rows, self.keys.shape[1], columns, self.keys.shape[3], self.keys)
        return cache

    def load(self, theirs: SelfAttentionCache) -> None:
        """Nothing: a fixed-shape state starts at column 0, and the columns not written yet are masked."""


class CrossAttentionCache(StaticKVCache):
    """One cross-attention layer's keys and values of a fixed memory, (M, K, S, D), filled once; the keys
    stored transposed where a step's few queries read them faster so (see StaticKVCache). The state's
    `groups` rows of an example share its memory row, so beam moves leave it unchanged; in a server's
    batch each request's example holds one, read by all its rows (`memory_readers`), up to the state's widest
    `memory_width`."""

    def __init__(self, state: RowLayout, transposed: bool = False):
        super().__init__(transposed)
        self.state = state

    def fill(self, k: torch.Tensor, v: torch.Tensor) -> CrossAttentionCache:
        """k, v (M, K, S, D) the memory's keys and values -> this cache, holding them."""
        super().append(k, v)
        return self

    def view(self, rows: int, width: int) -> StaticKVCache:
        """What a step of `rows` memory rows over `width` source positions reads."""
        if self.stored_keys is None:
            return self
        view = StaticKVCache(self.transposed)
        keys = self.stored_keys[:rows, :, :, :width] if self.transposed else self.stored_keys[:rows, :, :width]
        view.stored_keys, view.values = keys, self.values[:rows, :, :width]
        return view

    def reorder(self, index: torch.Tensor, spare: Spare = None) -> Spare:
        """Nothing: the rows of an example share its memory row, wherever its beams move."""
        return spare

    def repeat(self, n: int) -> None:
        """Nothing: the memory row is shared by n times more rows (the state's `groups`)."""

    def reorder_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Nothing: a request's rows hold the same memory."""

    def move_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        width = self.state.memory_width
        for buf in (self.keys, self.values):  # keys (R, K, S', D): a view of either layout
            held = buf[:, :, :width]
            held.index_copy_(0, dst, held.index_select(0, src))

    def join(self, rows: slice, theirs: CrossAttentionCache, memory_rows: torch.Tensor) -> None:
        """Memory rows `rows` of a batch take theirs' memory rows `memory_rows` (n,) (one per example, shared by
        its rows), zeros beyond their width (masked, finite)."""
        S = theirs.values.shape[2]
        keys = self.keys
        keys[rows, :, :S] = theirs.keys[memory_rows]
        keys[rows, :, S:] = 0
        self.values[rows, :, :S] = theirs.values[memory_rows]
        self.values[rows, :, S:] = 0

    def resize(self, rows: int, columns: int) -> None:
        """Buffers of rows x columns (source positions), the state's rows and memory width kept."""
        kept_rows, width = min(self.state.memory_rows, rows), min(self.state.memory_width, columns)
        old_keys, old_values = self.keys, self.values
        K, D = old_values.shape[1], old_values.shape[3]
        self.fill(old_values.new_zeros(rows, K, columns, D), old_values.new_zeros(rows, K, columns, D))
        self.keys[:kept_rows, :, :width] = old_keys[:kept_rows, :, :width]
        self.values[:kept_rows, :, :width] = old_values[:kept_rows, :, :width]

    def blank(self, state: RowLayout, rows: int, columns: int) -> CrossAttentionCache:
        """Zeros of rows x columns, keys laid out for the new state's groups (transposed where several rows
        read one memory row)."""
        K, D = self.values.shape[1], self.values.shape[3]
        zeros = self.values.new_zeros(rows, K, columns, D)
        return CrossAttentionCache(state, state.groups > 1).fill(zeros, torch.zeros_like(zeros))

    def load(self, theirs: CrossAttentionCache) -> None:
        S = theirs.values.shape[2]
        self.keys[:, :, :S].copy_(theirs.keys)
        self.values[:, :, :S].copy_(theirs.values)


class StateBag:
    """Every layer's decoding cache, in the order the model's layers read them: the step caches (`step`: each
    attention layer's that grows, self-attention first) and the memory caches (`memory`: the cross-attentions
    to a fixed memory). The decode state moves rows through it, each cache by its own kind's rule."""

    def __init__(self):
        self.step: list[SelfAttentionCache] = []
        self.memory: list[CrossAttentionCache] = []
        self.spare: Spare = None  # the one pair of buffers a beam reorder gathers into (see the module)

    def __iter__(self):
        yield from self.step
        yield from self.memory

    def reorder(self, index: torch.Tensor) -> None:
        for cache in self:
            self.spare = cache.reorder(index, self.spare)

    def repeat(self, n: int) -> None:
        for cache in self:
            cache.repeat(n)

    def reorder_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        for cache in self:
            cache.reorder_rows(dst, src)

    def move_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        for cache in self:
            cache.move_rows(dst, src)
