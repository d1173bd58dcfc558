"""The decode state: what decoding carries between steps, for R rows that may each be at a position of its own.

    state = model.start(src_ids, src_mask, max_new_tokens, beams)   # the encoder ran, or a prompt was prefilled
    logits = model.step(tgt_ids, state)                             # every row t columns on
    state.reorder(index)                                            # beam search
    batch.join(state, copies); batch.remove(rows)                   # a server's running batch

Every family with an attention decoder decodes through it (the encoder-decoder, and the causal LMs:
decoder-only, auto-regressive and parallel encoder-decoders); eager generation, the fixed-shape
compiled step and the server's running batch are three uses of one type, not three copies.

Per row: `lengths` (R,), the columns it has written (decoded positions; a causal LM's stream columns,
prompt included), and `pad` (R,), the leading columns of a left-padded prompt it does not use, so its
position at column c is c - pad. Per attention layer that writes as it decodes (self-attention, and
the research families' cross-attention to their advancing encoder), a `StepCache`: keys and values
(R, K, L, D) written at each row's next columns. Per layer that reads a fixed memory (cross-attention
to an encoder output), a `MemoryCache`: keys and values of M = R / groups memory rows (the beams of
one example share their example's), and one additive mask `memory_mask` (M, 1, 1, S) for all layers.

Three ways to run a step:
  aligned   every row at the same column, which the host knows (`columns`), as in `generate`: a step
            writes with a slice and attends over the columns written; no mask but a bias and padding.
  rows      rows at columns of their own (a server's batch, after `join` or `remove`): a step writes each
            row's keys at its own column and masks each row's keys beyond it; the host knows the widest.
  static    nothing read on the host, every shape fixed (compiled steps, CUDA graphs): the column is a
            device tensor, attention runs over all L columns of the buffers, those not written masked.

A family adds what its positions need: `biases` (relative biases, functions of query and key positions,
each tabulated once per width: T5's one that every layer shares, or UMT5's one per layer), `source_lengths`
(R,) where decoder positions continue after the source
(RoPE's "prepended" cross positions), `window` and `sliding` (a sliding-window self-attention's width and
which layers slide: their masks also block keys `window` or more columns behind the query), and
`next_input` (R,) where the first step decodes the prompt's last token in place of generate's
decoder-start placeholder (the causal LMs).

Shapes: R rows, M memory rows, K kv heads, L columns held, S memory (source) length, D head dim,
H heads, t new columns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from encdec.modules.attention import additive_mask, blocked_value
from encdec.modules.blocks import AttentionInputs
from encdec.modules.kv_cache import LayerCache, StaticKVCache

BiasFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # q_pos (T,), k_pos (S,) -> (1, H, T, S)


class StepCache:
    """One attention layer's keys and values of R rows (R, K, L, D), written at each row's next columns
    (Attention's cache protocol: `append` the new keys, get every key a query may read)."""

    frozen = False

    def __init__(self, state: DecodeState):
        self.state = state
        self.keys: torch.Tensor | None = None  # (R, K, L, D), made at the first append
        self.values: torch.Tensor | None = None
        self._spare: tuple[torch.Tensor, torch.Tensor] | None = None  # what `reorder` gathers into

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (R, K, t, D) at each row's next t columns -> the keys and values a step reads (R, K, W, D)."""
        state = self.state
        if self.keys is None:
            R, K, _, D = k.shape
            self.keys = k.new_zeros(state.capacity_rows, K, state.capacity, D)  # zeros: masked, finite
            self.values = v.new_zeros(state.capacity_rows, K, state.capacity, D)
        R, t = k.shape[0], k.shape[2]
        if state.static:
            self.keys.index_copy_(2, state.position, k)
            self.values.index_copy_(2, state.position, v)
            return self.keys, self.values
        if state.aligned:
            start = state.columns
            self.keys[:R, :, start : start + t] = k
            self.values[:R, :, start : start + t] = v
        else:  # t == 1: each row's key at its own column
            rows, at = state.row_index[:R], state.lengths[:R]
            self.keys[rows, :, at] = k[:, :, 0]
            self.values[rows, :, at] = v[:, :, 0]
        width = state.columns + t
        return self.keys[:R, :, :width], self.values[:R, :, :width]

    def reorder(self, index: torch.Tensor, columns: int, in_place: bool) -> None:
        """Keep rows `index` (R,) of the first `columns` columns. In place (the buffers never move: static mode),
        or gathered into a second pair of buffers that then become the cache (the two swap at every reorder:
        one read and one write of the written columns, no allocation; gathering into a temporary and copying
        it back read and wrote them twice, 68 against 41 us per layer's keys for 32 beams of 50 positions)."""
        if self.keys is None:
            return
        R = index.shape[0]
        if in_place:
            for buf in (self.keys, self.values):
                buf[:R, :, :columns] = buf[:R, :, :columns].index_select(0, index)
            return
        if self._spare is None or self._spare[0].shape != self.keys.shape:
            self._spare = (torch.empty_like(self.keys), torch.empty_like(self.values))
        spare_k, spare_v = self._spare
        torch.index_select(self.keys[:R, :, :columns], 0, index, out=spare_k[:R, :, :columns])
        torch.index_select(self.values[:R, :, :columns], 0, index, out=spare_v[:R, :, :columns])
        self._spare = (self.keys, self.values)
        self.keys, self.values = spare_k, spare_v

    def resized(self, rows: int, columns: int, keep_rows: int, keep_columns: int) -> None:
        """New buffers of `rows` x `columns`, the first keep_rows x keep_columns kept."""
        if self.keys is None:
            return
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(rows, old.shape[1], columns, old.shape[3])
            new[:keep_rows, :, :keep_columns] = old[:keep_rows, :, :keep_columns]
            setattr(self, name, new)
        self._spare = None


class MemoryCache(StaticKVCache):
    """One cross-attention layer's keys and values of a fixed memory: (M, K, S, D), the keys stored
    transposed where a step's few queries read them faster so (see StaticKVCache). `view(n, S)` is what a
    step of n memory rows over S source positions reads."""

    def view(self, rows: int, width: int) -> StaticKVCache:
        if self.stored_keys is None:
            return self
        view = StaticKVCache(self.transposed)
        keys = self.stored_keys[:rows, :, :, :width] if self.transposed else self.stored_keys[:rows, :, :width]
        view.stored_keys, view.values = keys, self.values[:rows, :, :width]
        return view


class DecodeState:
    """The decoding state of R rows: positions, per-layer caches, masks and position terms (see the module)."""

    def __init__(self, rows: int, capacity: int, device: torch.device | str, dtype: torch.dtype):
        self.rows, self.capacity, self.capacity_rows = rows, capacity, rows
        self.device, self.dtype = torch.device(device), dtype
        self.lengths = torch.zeros(rows, dtype=torch.long, device=self.device)  # (R,) columns written per row
        self.row_index = torch.arange(rows, device=self.device)
        self.pad: torch.Tensor | None = None  # (R,) leading columns a left-padded prompt does not use
        self.columns = 0  # host: the columns the widest row has written
        self.aligned = True  # every row at `columns`
        self.static = False
        self.position = self.lengths[:1]  # (1,) the column every row writes next, in static mode
        self.caches: list[StepCache] = []
        self.memory: list[MemoryCache] = []
        self.memory_mask: torch.Tensor | None = None  # additive (M, 1, 1, S); None: every position real
        self.memory_width = 0  # host: S, the widest memory row's real length
        self.groups = 1  # rows per memory row (beams sharing their example's memory)
        self.biases: list[BiasFn] = []  # the decoder's relative biases: T5's one for all layers, UMT5's per layer
        self._bias_tables: dict[int, torch.Tensor] = {}  # bias -> (1, H, N, N) of positions 0..N-1
        self.window: int | None = None  # sliding self-attention sees keys fewer than this many columns back
        self.sliding: list[bool] = []  # per decoder layer: whether its self-attention slides
        self.source_lengths: torch.Tensor | None = None  # (R,) where positions continue after the source
        self.next_input: torch.Tensor | None = None  # (R,) the token a row's first step decodes instead
        self.substitute: torch.Tensor | None = None  # (R,) bool: rows whose next step takes next_input
        self._layers: list[LayerCache] | None = None

    # -- what a family sets up in `start` ---------------------------------------------------------------

    def new_caches(self, n: int, kv_heads: int | None = None, d_head: int | None = None) -> list[StepCache]:
        """n step caches, their buffers made now when their kv heads and head width are given (else at their
        first write)."""
        caches = [StepCache(self) for _ in range(n)]
        if kv_heads is not None:
            for cache in caches:
                cache.keys = torch.zeros(
                    self.rows, kv_heads, self.capacity, d_head, dtype=self.dtype, device=self.device
                )
                cache.values = torch.zeros_like(cache.keys)
        self.caches.extend(caches)
        return caches

    def set_memory(self, keys_values: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor | None) -> None:
        """The fixed memory's keys and values per layer, each (M, K, S, D), with M = R / groups; mask (M, S)
        bool, True at real positions (None: all real)."""
        M, S = keys_values[0][0].shape[0], keys_values[0][0].shape[2]
        self.groups = self.rows // M
        transposed = self.groups > 1  # several query rows per memory row read transposed keys (StaticKVCache)
        self.memory = []
        for k, v in keys_values:
            cache = MemoryCache(transposed)
            cache.append(k, v)
            self.memory.append(cache)
        self.memory_mask = additive_mask(mask[:, None, None, :], None, self.dtype) if mask is not None else None
        self.memory_width = S
        self._layers = None

    # -- what a step reads --------------------------------------------------------------------------------

    def positions(self, t: int) -> torch.Tensor:
        """The positions of each row's next t columns: (t,) when every row is at the same one, else (R, t)."""
        if self.static:
            return self.position + torch.arange(t, device=self.device)  # (t,)
        columns = torch.arange(self.columns, self.columns + t, device=self.device)  # (t,) when aligned
        if self.aligned:
            return columns if self.pad is None else (columns[None, :] - self.pad[: self.rows, None]).clamp(min=0)
        pos = self.lengths[: self.rows, None] + torch.arange(t, device=self.device)  # (R, t)
        return pos if self.pad is None else (pos - self.pad[: self.rows, None]).clamp(min=0)

    def self_attentions(self, t: int, positions: torch.Tensor) -> list[AttentionInputs]:
        """`self_attention` for every relative bias in `biases` (one entry every layer shares, or one per layer:
        blocks.for_layer picks a layer's), or one entry without a bias; with a sliding window, one per layer."""
        inputs = [self.self_attention(t, positions, bias) for bias in range(max(len(self.biases), 1))]
        if self.window is None:
            return inputs
        near = self.self_attention(t, positions, window=self.window)  # no relative bias beside a window
        return [near if slides else inputs[0] for slides in self.sliding]

    def self_attention(
        self, t: int, positions: torch.Tensor, bias_index: int = 0, window: int | None = None
    ) -> AttentionInputs:
        """The inputs of a causal attention over the written columns for the next t columns of every row
        (self-attention; the research families' cross-attention to their advancing encoder), with relative
        bias `bias_index` of `biases` where there are any, over the keys fewer than `window` columns back
        where given."""
        R = self.rows
        has_bias = bool(self.biases)
        if self.static:
            keys = torch.arange(self.capacity, device=self.device)
            allowed = keys <= self.position
            if window is not None:
                allowed = allowed & (keys > self.position - window)
            allowed = allowed[None, None, None, :]  # (1, 1, 1, L)
            bias = self.bias_rows(self.position, bias_index) if has_bias else None
            return AttentionInputs(mask=masked(allowed, bias, self.dtype), q_pos=positions, k_pos=positions)
        width = self.columns + t
        if self.aligned and self.columns == 0 and t > 1 and self.pad is None and not has_bias and window is None:
            return AttentionInputs(is_causal=True, q_pos=positions, k_pos=positions)  # SDPA's mask-free path
        keys = torch.arange(width, device=self.device)  # (W,)
        if self.aligned:
            allowed = None  # one new column sees every written one
            if t > 1 or window is not None:
                query = self.columns + torch.arange(t, device=self.device)[:, None]  # (t, 1)
            if t > 1:  # (1, 1, t, W): causal among the new columns
                allowed = (keys[None, :] <= query)[None, None]
            if window is not None:  # (1, 1, t, W): and within the window
                near = (keys[None, :] > query - window)[None, None]
                allowed = near if allowed is None else allowed & near
            if self.pad is not None:
                real = (keys[None, :] >= self.pad[:R, None])[:, None, None, :]  # (R, 1, 1, W)
                allowed = real if allowed is None else real & allowed
            bias = None
            if has_bias:
                bias = self.bias_table(width, bias_index)[:, :, self.columns : width, :width]  # (1, H, t, W)
            mask = bias if allowed is None else masked(allowed, bias, self.dtype)
            return AttentionInputs(mask=mask, q_pos=positions, k_pos=positions)
        lengths = self.lengths[:R]
        allowed = keys[None, :] <= lengths[:, None]  # (R, W): each row up to its own column
        if window is not None:
            allowed &= keys[None, :] > lengths[:, None] - window
        if self.pad is not None:
            allowed &= keys[None, :] >= self.pad[:R, None]
        allowed = allowed[:, None, None, :]  # (R, 1, 1, W)
        bias = None
        if has_bias:  # each row's bias row, at its own position
            bias = self.bias_table(width, bias_index)[0][:, lengths, :width].transpose(0, 1)[:, :, None]  # (R, H, 1, W)
        return AttentionInputs(mask=masked(allowed, bias, self.dtype), q_pos=positions, k_pos=positions)

    def memory_attention(self, positions: torch.Tensor) -> AttentionInputs:
        """The inputs of cross-attention to the fixed memory for queries at `positions` ((t,) or (R, t))."""
        q_pos = positions
        if self.source_lengths is not None:  # positions continue after each row's source
            q_pos = self.source_lengths[: self.rows, None] + positions  # (R, t)
        mask = self.memory_mask
        if mask is not None and not (self.static or self.aligned):  # a batch's buffers hold spare rows and width
            mask = mask[: self.rows // self.groups, :, :, : self.memory_width]
        return AttentionInputs(mask=mask, q_pos=q_pos, query_groups=self.groups)

    def decoder_layers(self) -> list[LayerCache]:
        """Each encoder-decoder layer's caches: step cache i (self-attention) beside memory layer i (cross-
        attention), as a step reads them (kept until rows join or leave)."""
        if self._layers is None:
            M, width = self.rows // self.groups, self.memory_width
            memory = [m if self.static else m.view(M, width) for m in self.memory]
            self._layers = [LayerCache(c, m) for c, m in zip(self.caches, memory)]
        return self._layers

    def bias_table(self, width: int, bias_index: int = 0) -> torch.Tensor:
        """(1, H, N, N) of relative bias `bias_index` for positions 0..N-1, N >= width (made again, doubled, when
        outgrown)."""
        table = self._bias_tables.get(bias_index)
        if table is None or table.shape[-1] < width:
            n = max(width, self.capacity, 2 * (0 if table is None else table.shape[-1]))
            pos = torch.arange(n, device=self.device)
            table = self._bias_tables[bias_index] = self.biases[bias_index](pos, pos).to(self.dtype).contiguous()
        return table

    def bias_rows(self, position: torch.Tensor, bias_index: int = 0) -> torch.Tensor:
        """Static mode: the row of `position` (1,) of bias `bias_index` over all L keys, (1, H, 1, L), chosen on
        the device."""
        return self.bias_table(self.capacity, bias_index).index_select(2, position)[..., : self.capacity]

    def first_inputs(self, tgt_ids: torch.Tensor) -> torch.Tensor:
        """tgt_ids (R, t) with each first step's placeholder replaced by the row's `next_input`."""
        if self.substitute is None:
            return tgt_ids
        R = self.rows
        first = torch.where(self.substitute[:R], self.next_input[:R], tgt_ids[:, 0])
        self.substitute[:R] = False
        if self.aligned:  # every row took its substitute at once
            self.substitute = None
        return torch.cat((first[:, None], tgt_ids[:, 1:]), dim=1)

    # -- moving on ------------------------------------------------------------------------------------------

    def advance(self, t: int) -> None:
        """Every row has written t more columns (a step calls `ensure(t)` before it writes them). Aligned rows
        are all at `columns`, which the host counts: their `lengths` are set when read (`row_lengths`)."""
        if self.static or not self.aligned:
            self.lengths[: self.rows] += t
        self.columns += t

    def row_lengths(self) -> torch.Tensor:
        """(R,) the columns each row has written."""
        if self.aligned and not self.static:
            self.lengths[: self.rows] = self.columns
        return self.lengths[: self.rows]

    def ensure(self, t: int) -> None:
        """Room for t more columns of every row (buffers doubled when outgrown); not in static mode."""
        if self.static or self.columns + t <= self.capacity:
            return
        capacity = max(self.columns + t, 2 * self.capacity)
        for cache in self.caches:
            cache.resized(self.capacity_rows, capacity, self.capacity_rows, self.columns)
        self.capacity = capacity

    def repeat(self, n: int) -> None:
        """Each row becomes n rows, laid out example-major (row r becomes rows r*n .. r*n+n-1), caches copied:
        the beams or samples of an example after its prompt ran once. The memory stays, shared n ways more."""
        for cache in self.caches:
            if cache.keys is not None:
                cache.keys = cache.keys[: self.rows].repeat_interleave(n, 0)
                cache.values = cache.values[: self.rows].repeat_interleave(n, 0)
                cache._spare = None
        for name in ("lengths", "pad", "source_lengths", "next_input", "substitute"):
            tensor = getattr(self, name)
            if tensor is not None:
                setattr(self, name, tensor[: self.rows].repeat_interleave(n, 0))
        self.rows = self.capacity_rows = self.rows * n
        self.row_index = torch.arange(self.rows, device=self.device)
        self.position = self.lengths[:1]
        self.groups *= n
        self._layers = None

    def resize_rows(self, rows: int) -> None:
        """Size a state made for no rows yet (a causal LM started without a prompt) for `rows` rows."""
        self.rows = self.capacity_rows = rows
        self.lengths = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.row_index = torch.arange(rows, device=self.device)
        self.position = self.lengths[:1]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (R,), each within its own example's rows (beam search, Steppable's contract): the
        written columns of every step cache are gathered (in place in static mode, whose buffers never move);
        what is the same for all rows of an example (memory, lengths, padding, position terms) stays."""
        for cache in self.caches:
            cache.reorder(index, self.columns, in_place=self.static)

    # -- a server's running batch ---------------------------------------------------------------------------

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
        for mine, theirs in zip(self.caches, other.caches):
            if theirs.keys is None:
                continue
            if mine.keys is None:
                K, D = theirs.keys.shape[1], theirs.keys.shape[3]
                mine.keys = theirs.keys.new_zeros(self.capacity_rows, K, self.capacity, D)
                mine.values = theirs.values.new_zeros(self.capacity_rows, K, self.capacity, D)
            c = other.columns
            mine.keys[rows, :, :c] = theirs.keys[pick, :, :c]
            mine.values[rows, :, :c] = theirs.values[pick, :, :c]
        if other.memory:
            memory_rows = torch.div(pick, other.groups, rounding_mode="floor")  # the memory row of each new row
            S = other.memory_width
            for mine, theirs in zip(self.memory, other.memory):
                keys, values = theirs.keys[memory_rows], theirs.values[memory_rows]  # (n, K, S, D)
                mine_keys = mine.keys  # (R, K, S', D) view
                mine_keys[rows, :, :S] = keys
                mine_keys[rows, :, S:] = 0
                mine.values[rows, :, :S] = values
                mine.values[rows, :, S:] = 0
            blocked = blocked_value(self.dtype, self.device.type)
            self.memory_mask[rows] = blocked
            theirs_mask = other.memory_mask[memory_rows] if other.memory_mask is not None else 0.0
            self.memory_mask[rows, :, :, :S] = theirs_mask
            self.memory_width = max(self.memory_width, S)
            self._source_widths[rows] = S
        self.lengths[rows] = other.row_lengths()[pick]
        for name in ("pad", "source_lengths", "next_input"):
            theirs = getattr(other, name)
            if theirs is not None:
                self._row_tensor(name, theirs.dtype)[rows] = theirs[pick]
        if other.substitute is not None or other.next_input is not None:
            flags = self._row_tensor("substitute", torch.bool)
            flags[rows] = other.substitute[pick] if other.substitute is not None else False
        if other.biases:
            self.biases = other.biases
        if other.window is not None:
            self.window, self.sliding = other.window, other.sliding
        self.rows += n
        self.columns = max(self.columns, other.columns)
        self.aligned = False
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
            for cache in self.caches:
                if cache.keys is not None:
                    for buf in (cache.keys, cache.values):
                        buf[dst, :, : self.columns] = buf[src, :, : self.columns]
            for cache in self.memory:
                keys = cache.keys
                keys[dst, :, : self.memory_width] = keys[src, :, : self.memory_width]
                cache.values[dst, :, : self.memory_width] = cache.values[src, :, : self.memory_width]
            for name in ("lengths", "pad", "source_lengths", "next_input", "substitute", "memory_mask"):
                tensor = getattr(self, name)
                if tensor is not None:
                    tensor[dst] = tensor[src]
            if self.memory:
                self._source_widths[dst] = self._source_widths[src]
        self.rows = keep
        self._layers = None
        self.narrow()
        return dict(zip(movers, holes))

    def reorder_rows(self, rows: list[int], order: list[int]) -> None:
        """Row rows[i] takes the step caches of rows[order[i]] (a served beam search's reorder)."""
        if order == list(range(len(order))):
            return
        dst = torch.tensor(rows, device=self.device)
        src = dst[torch.tensor(order, device=self.device)]
        for cache in self.caches:
            if cache.keys is not None:
                for buf in (cache.keys, cache.values):
                    buf[dst] = buf[src]

    def narrow(self) -> None:
        """Once rows have left: the widest remaining row's columns and memory, learnt on the host (one sync)."""
        if self.rows == 0:
            self.columns, self.memory_width = 0, 0
            return
        widest = [self.lengths[: self.rows].max()]
        if self.memory:
            widest.append(self._source_widths[: self.rows].max())
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
        """Room for `rows` rows of `columns` columns, and for `like`'s memory (buffers doubled as outgrown)."""
        R, L = self.capacity_rows, self.capacity
        new_R = max(rows, 2 * R) if rows > R else R
        new_L = max(columns, 2 * L) if columns > L else L
        if (new_R, new_L) != (R, L):
            for cache in self.caches:
                cache.resized(new_R, new_L, self.rows, self.columns)
            for name in ("lengths", "pad", "source_lengths", "next_input", "substitute", "_source_widths"):
                tensor = getattr(self, name, None)
                if tensor is not None:
                    grown = tensor.new_zeros(new_R, *tensor.shape[1:])
                    grown[: self.rows] = tensor[: self.rows]
                    setattr(self, name, grown)
            self.row_index = torch.arange(new_R, device=self.device)
            self.capacity_rows, self.capacity = new_R, new_L
        if not self.caches and like.caches:
            self.caches = [StepCache(self) for _ in like.caches]
        if like.memory:
            self._grow_memory(new_R, like)

    def _grow_memory(self, rows: int, like: DecodeState) -> None:
        """Per-row memory buffers of `rows` rows and at least like's width (the batch's memory is per row)."""
        width = max(like.memory_width, self.memory_width)
        have = self.memory[0].values.shape if self.memory else None
        if have is not None and have[0] >= rows and have[2] >= width:
            return
        S = max(width, 2 * have[2]) if have is not None and width > have[2] else (have[2] if have else width)
        kept_rows = self.rows
        memory = []
        for i, theirs in enumerate(like.memory):
            K, D = theirs.values.shape[1], theirs.values.shape[3]
            cache = MemoryCache(False)
            keys = theirs.values.new_zeros(rows, K, S, D)
            values = theirs.values.new_zeros(rows, K, S, D)
            if self.memory:
                keys[:kept_rows, :, : self.memory_width] = self.memory[i].keys[:kept_rows, :, : self.memory_width]
                values[:kept_rows, :, : self.memory_width] = self.memory[i].values[:kept_rows, :, : self.memory_width]
            cache.append(keys, values)
            memory.append(cache)
        mask = torch.full(
            (rows, 1, 1, S), blocked_value(self.dtype, self.device.type), dtype=self.dtype, device=self.device
        )
        if self.memory_mask is not None and self.memory:
            mask[:kept_rows, :, :, : self.memory_width] = self.memory_mask[:kept_rows, :, :, : self.memory_width]
        widths = torch.zeros(rows, dtype=torch.long, device=self.device)
        if self.memory:
            widths[:kept_rows] = self._source_widths[:kept_rows]
        self.memory, self.memory_mask, self._source_widths, self.groups = memory, mask, widths, 1
        self._layers = None

    # -- fixed shapes: compiled steps, CUDA graphs -------------------------------------------------------

    @classmethod
    def fixed(cls, like: DecodeState, capacity: int, source: int) -> DecodeState:
        """Static-mode buffers of `like`'s layout (rows, memory rows, caches) for `capacity` columns and a memory
        of `source` positions (masked past each row's own), made once and filled anew by `load` for every
        call of that shape; relative biases are tabulated here, not in the step."""
        state = cls(like.rows, capacity, like.device, like.dtype)
        state.static = True
        for theirs in like.caches:
            mine = StepCache(state)
            K, D = theirs.keys.shape[1], theirs.keys.shape[3]
            mine.keys = theirs.keys.new_zeros(like.rows, K, capacity, D)
            mine.values = theirs.values.new_zeros(like.rows, K, capacity, D)
            state.caches.append(mine)
        M = like.rows // like.groups
        for theirs in like.memory:
            K, D = theirs.values.shape[1], theirs.values.shape[3]
            mine = MemoryCache(theirs.transposed)
            mine.append(theirs.values.new_zeros(M, K, source, D), theirs.values.new_zeros(M, K, source, D))
            state.memory.append(mine)
        state.groups, state.memory_width = like.groups, source
        blocked = blocked_value(state.dtype, state.device.type)
        state.memory_mask = torch.full((M, 1, 1, source), blocked, dtype=state.dtype, device=state.device)
        state.biases = like.biases
        state.window, state.sliding = like.window, like.sliding
        for bias_index in range(len(state.biases)):
            state.bias_table(capacity, bias_index)
        if like.source_lengths is not None:
            state.source_lengths = torch.zeros_like(like.source_lengths)
        return state

    def load(self, other: DecodeState) -> None:
        """Start anew (static mode) from `other`, a state `start` has just made of the same layout."""
        S = other.memory_width
        for mine, theirs in zip(self.memory, other.memory):
            mine.keys[:, :, :S].copy_(theirs.keys)
            mine.values[:, :, :S].copy_(theirs.values)
        self.memory_mask.fill_(blocked_value(self.dtype, self.device.type))
        if other.memory_mask is not None:
            self.memory_mask[..., :S].copy_(other.memory_mask)
        else:
            self.memory_mask[..., :S].zero_()
        if self.source_lengths is not None:
            self.source_lengths.copy_(other.source_lengths)
        self.lengths.zero_()
        self.columns = 0

    @classmethod
    def batch(cls, device: torch.device | str, dtype: torch.dtype) -> DecodeState:
        """An empty running batch for a server: rows join it (`join`) and leave it (`remove`)."""
        state = cls(0, 1, device, dtype)
        state.aligned = False
        state._source_widths = torch.zeros(0, dtype=torch.long, device=state.device)
        return state


def masked(allowed: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """`bias` (or zeros) with the entries `allowed` does not allow blocked (attention.additive_mask's value),
    without its shape arithmetic: `allowed` broadcasts to the bias's shape, or is the shape when no bias."""
    blocked = blocked_value(dtype, allowed.device.type)
    if bias is None:
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, blocked)
    shape = tuple(max(a, b) for a, b in zip(allowed.shape, bias.shape))  # both 4-d
    return bias.to(dtype).expand(shape).masked_fill(~allowed, blocked)
