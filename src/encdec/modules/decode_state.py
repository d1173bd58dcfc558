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
position at column c is c - pad. Each attention layer's cache is its own kind's object in the state's
bag (`bag`, encdec.modules.layer_caches): a layer that writes as it decodes (self-attention, and the
research families' cross-attention to their advancing encoder) a `SelfAttentionCache`, keys and values
(R, K, L, D) written at each row's next columns (`caches`); a layer that reads a fixed memory (cross-
attention to an encoder output) a `CrossAttentionCache`, keys and values of M = R / groups memory rows,
the beams and samples of one example sharing their example's (`memory`), beside one additive mask
`memory_mask` (M, 1, 1, S) for all layers. The state moves rows (beams, repeats, a batch's joins) through
the bag, each cache by its own rule.

Three ways to run a step:
  aligned   every row at the same column, which the host knows (`columns`), as in `generate`: a step
            writes with a slice and attends over the columns written; no mask but a bias and padding.
  rows      rows at columns of their own (a server's batch, encdec.modules.running_batch, after `join` or
            `remove`): a step writes each row's t keys at its own next columns and masks each row's keys
            beyond each query; the host knows the widest. A row cut back (RunningBatch.cut_back: a served
            speculative round's rejected drafts) writes over the columns it forgot.
  static    nothing read on the host, every shape fixed (compiled steps, CUDA graphs): the column is a
            device tensor, attention runs over all L columns of the buffers, those not written masked.

A step's self-attention masks come from the layers' attention kinds (`attend_as`, encdec.modules.attention_kinds:
the rules and biases the whole-sequence, long-input and FlexAttention masks read too): each distinct masking
kinds one mask, their rules folded over the step's query columns and the written ones, their bias (T5's
relative bias that every layer shares, UMT5's one per layer) tabulated once per width; a sliding layer's band
blocks keys `width` or more columns behind the query; a causal LM's layers are causal alone unless it says
more. A family adds what its positions need beside: `source_lengths` (R,) where decoder positions continue
after the source (RoPE's "prepended" cross positions), and `next_input` (R,) where the first step decodes the
prompt's last token in place of generate's decoder-start placeholder (the causal LMs).

Shapes: R rows, M memory rows, K kv heads, L columns held, S memory (source) length, D head dim,
H heads, t new columns.
"""

from __future__ import annotations

import torch

from encdec.modules.attention import MemoryReaders, additive_mask, blocked_value
from encdec.modules.attention_kinds import Causal, LayerKinds, layer_allows, layer_bias, only_causal
from encdec.modules.blocks import AttentionInputs
from encdec.modules.kv_cache import LayerCache
from encdec.modules.layer_caches import CrossAttentionCache, SelfAttentionCache, StateBag

CAUSAL: LayerKinds = (Causal(),)  # a causal LM's self-attention, every layer's


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
        self.bag = StateBag()  # every layer's cache: bag.step (growing), bag.memory (a fixed memory's)
        self.memory_mask: torch.Tensor | None = None  # additive (M, 1, 1, S); None: every position real
        self.memory_width = 0  # host: S, the widest memory row's real length
        self.groups = 1  # rows per memory row (beams sharing their example's memory)
        self.memory_readers: MemoryReaders | None = None  # which rows read which memory row, where uneven
        self.kinds: list[LayerKinds] = [CAUSAL]  # the distinct masking kinds of the layers' self-attentions
        self.kind_of_layer: list[int] = []  # per layer: its entry of `kinds` (none: every layer the first)
        self._bias_tables: dict[int, torch.Tensor | None] = {}  # kinds index -> (1, H, N, N) of positions 0..N-1
        self.source_lengths: torch.Tensor | None = None  # (R,) where positions continue after the source
        self.next_input: torch.Tensor | None = None  # (R,) the token a row's first step decodes instead
        self.substitute: torch.Tensor | None = None  # (R,) bool: rows whose next step takes next_input
        self._layers: list[LayerCache] | None = None

    # -- what a family sets up in `start` ---------------------------------------------------------------

    @property
    def caches(self) -> list[SelfAttentionCache]:
        """The growing caches, in the order the model's layers read them."""
        return self.bag.step

    @property
    def memory(self) -> list[CrossAttentionCache]:
        """The fixed memory's caches, one per decoder layer."""
        return self.bag.memory

    def new_caches(self, n: int, kv_heads: int | None = None, d_head: int | None = None) -> list[SelfAttentionCache]:
        """n growing caches, their buffers made now when their kv heads and head width are given (else at their
        first write)."""
        caches = [SelfAttentionCache(self) for _ in range(n)]
        if kv_heads is not None:
            like = torch.empty(0, dtype=self.dtype, device=self.device)
            for cache in caches:
                cache.allocate(self.rows, kv_heads, self.capacity, d_head, like)
        self.bag.step.extend(caches)
        return caches

    def set_memory(self, keys_values: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor | None) -> None:
        """The fixed memory's keys and values per layer, each (M, K, S, D), with M = R / groups; mask (M, S)
        bool, True at real positions (None: all real)."""
        M, S = keys_values[0][0].shape[0], keys_values[0][0].shape[2]
        self.groups = self.rows // M
        transposed = self.groups > 1  # several query rows per memory row read transposed keys (StaticKVCache)
        self.bag.memory = [CrossAttentionCache(self, transposed).fill(k, v) for k, v in keys_values]
        self.memory_mask = additive_mask(mask[:, None, None, :], None, self.dtype) if mask is not None else None
        self.memory_width = S
        self._layers = None

    @property
    def memory_rows(self) -> int:
        """M, the memory rows the rows read: R / groups (a running batch counts its own)."""
        return self.rows // self.groups

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

    def attend_as(self, layers: list[LayerKinds]) -> None:
        """Each decoder layer's self-attention kinds (models.stack.Stack.layer_kinds): what a step's masks fold,
        the layers of the same masking kinds (T5's shared bias; every global layer) sharing one mask."""
        masking = [tuple(kind for kind in kinds if kind.masks) for kinds in layers]
        self.kinds = list(dict.fromkeys(masking)) or [CAUSAL]
        self.kind_of_layer = [self.kinds.index(kinds) for kinds in masking]
        self._bias_tables = {}

    def self_attentions(self, t: int, positions: torch.Tensor) -> list[AttentionInputs]:
        """`self_attention` of each distinct masking kinds in `kinds`: one entry every layer shares, or one per
        layer (blocks.for_layer picks a layer's)."""
        inputs = [self.self_attention(t, positions, index) for index in range(len(self.kinds))]
        return inputs if len(inputs) == 1 else [inputs[index] for index in self.kind_of_layer]

    def self_attention(self, t: int, positions: torch.Tensor, index: int = 0) -> AttentionInputs:
        """The inputs of an attention over the written columns for the next t columns of every row (self-
        attention; the research families' cross-attention to their advancing encoder) under kinds[index]: its
        kinds' rules (attention_kinds.layer_allows) folded over each query's column and the keys', beside the
        keys a left-padded prompt does not use, with its kinds' bias. Causal's rule is what hides a row's
        columns not written yet (rows, static); a single new column in aligned mode is the newest written
        one, so there it allows every key and is not folded."""
        kinds, R = self.kinds[index], self.rows
        if self.static:  # one column, on the device
            width, queries = self.capacity, self.position  # (1,)
        elif self.aligned:
            width = self.columns + t
            if self.columns == 0 and t > 1 and self.pad is None and only_causal(kinds):
                return AttentionInputs(is_causal=True, q_pos=positions, k_pos=positions)  # SDPA's mask-free path
            if t == 1:
                kinds = tuple(kind for kind in kinds if kind != CAUSAL[0])
            queries = self.columns + torch.arange(t, device=self.device)  # (t,)
        else:  # t columns a row, each row's from its own
            width, queries = self.columns + t, self.lengths[:R, None] + torch.arange(t, device=self.device)  # (R, t)
        keys = torch.arange(width, device=self.device)  # (W,)
        allowed = layer_allows(kinds, queries[..., None], keys)  # (t, W) or (R, t, W)
        if allowed is not None:
            allowed = allowed[None, None] if self.aligned or self.static else allowed[:, None]
        if self.pad is not None and not self.static:
            real = (keys[None, :] >= self.pad[:R, None])[:, None, None, :]  # (R, 1, 1, W)
            allowed = real if allowed is None else real & allowed
        bias = self.bias_table(index, width)
        if bias is not None:  # each query column's row over the W keys
            if self.aligned and not self.static:
                bias = bias[:, :, self.columns : width, :width]  # (1, H, t, W)
            elif self.static:  # (1, H, 1, L)
                bias = bias.index_select(2, queries)[..., :width]
            else:  # (1, H, R * t, W) -> rows' (R, H, t, W)
                bias = bias[0].index_select(1, queries.reshape(-1))[..., :width]
                bias = bias.view(bias.shape[0], R, t, width).transpose(0, 1)
        return AttentionInputs(mask=additive_mask(allowed, bias, self.dtype), q_pos=positions, k_pos=positions)

    def memory_attention(self, positions: torch.Tensor) -> AttentionInputs:
        """The inputs of cross-attention to the fixed memory for queries at `positions` ((t,) or (R, t))."""
        q_pos = positions
        if self.source_lengths is not None:  # positions continue after each row's source
            q_pos = self.source_lengths[: self.rows, None] + positions  # (R, t)
        mask = self.memory_mask
        if mask is not None and not (self.static or self.aligned):  # a batch's buffers hold spare rows and width
            mask = mask[: self.memory_rows, :, :, : self.memory_width]
        return AttentionInputs(mask=mask, q_pos=q_pos, query_groups=self.groups, memory_readers=self.memory_readers)

    def decoder_layers(self) -> list[LayerCache]:
        """Each encoder-decoder layer's caches: step cache i (self-attention) beside memory layer i (cross-
        attention), as a step reads them (kept until rows join or leave)."""
        if self._layers is None:
            M, width = self.memory_rows, self.memory_width
            memory = [m if self.static else m.view(M, width) for m in self.memory]
            self._layers = [LayerCache(c, m) for c, m in zip(self.caches, memory)]
        return self._layers

    def bias_table(self, index: int, width: int) -> torch.Tensor | None:
        """(1, H, N, N) of kinds[index]'s position terms of the scores (T5's relative bias) for positions
        0..N-1, N >= width, tabulated once (made again, doubled, when outgrown); None where they add none."""
        held = self._bias_tables.get(index)
        if index in self._bias_tables and (held is None or held.shape[-1] >= width):
            return held
        n = max(width, self.capacity, 2 * (0 if held is None else held.shape[-1]))
        pos = torch.arange(n, device=self.device)
        table = layer_bias(self.kinds[index], pos, pos)
        table = self._bias_tables[index] = None if table is None else table.to(self.dtype).contiguous()
        return table

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

    def truncate(self, columns: int) -> None:
        """Keep the first `columns` written columns of every row, forgetting those after (speculative decoding's
        rejected draft tokens, generation/speculative.py): the next step writes over them. Aligned rows only,
        whose written columns the host counts."""
        if self.static or not self.aligned:
            raise ValueError("a decode state is cut back only while its rows are aligned (generate's, not a batch's)")
        self.columns = min(self.columns, columns)

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
        for cache in self.bag.step:
            cache.resize(self.capacity_rows, capacity)
        self.capacity = capacity

    def repeat(self, n: int) -> None:
        """Each row becomes n rows, laid out example-major (row r becomes rows r*n .. r*n+n-1), caches copied:
        the beams or samples of an example after its prompt ran once. The memory stays, shared n ways more."""
        self.bag.repeat(n)
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
        written columns of every growing cache are gathered (in place in static mode, whose buffers never move);
        what is the same for all rows of an example (memory, lengths, padding, position terms) stays."""
        self.bag.reorder(index)

    # -- fixed shapes: compiled steps, CUDA graphs -------------------------------------------------------

    @classmethod
    def fixed(cls, like: DecodeState, capacity: int, source: int) -> DecodeState:
        """Static-mode buffers of `like`'s layout (rows, memory rows, caches) for `capacity` columns and a memory
        of `source` positions (masked past each row's own), made once and filled anew by `load` for every
        call of that shape; the kinds' biases are tabulated here, not in the step."""
        state = cls(like.rows, capacity, like.device, like.dtype)
        state.static = True
        state.groups, state.memory_width = like.groups, source
        M = like.rows // like.groups
        state.bag.step = [theirs.blank(state, like.rows, capacity) for theirs in like.bag.step]
        state.bag.memory = [theirs.blank(state, M, source) for theirs in like.bag.memory]
        blocked = blocked_value(state.dtype, state.device.type)
        state.memory_mask = torch.full((M, 1, 1, source), blocked, dtype=state.dtype, device=state.device)
        state.kinds, state.kind_of_layer = like.kinds, like.kind_of_layer
        for index in range(len(state.kinds)):
            state.bias_table(index, capacity)
        if like.source_lengths is not None:
            state.source_lengths = torch.zeros_like(like.source_lengths)
        return state

    def load(self, other: DecodeState) -> None:
        """Start anew (static mode) from `other`, a state `start` has just made of the same layout."""
        S = other.memory_width
        for mine, theirs in zip(self.bag, other.bag):
            mine.load(theirs)
        self.memory_mask.fill_(blocked_value(self.dtype, self.device.type))
        if other.memory_mask is not None:
            self.memory_mask[..., :S].copy_(other.memory_mask)
        else:
            self.memory_mask[..., :S].zero_()
        if self.source_lengths is not None:
            self.source_lengths.copy_(other.source_lengths)
        self.lengths.zero_()
        self.columns = 0
