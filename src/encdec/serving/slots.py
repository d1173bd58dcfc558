"""The running decoder batch of a server: rows (slots) that join and leave between steps, each at its own position.

    buffers, per decoder layer:  self keys / values  (R, K, L, D)   written at each row's own offset
                                 cross keys / values (R, K, S, D)   filled when the row's request is encoded
    per row:                     offset (positions decoded), source length, cross mask (R, 1, 1, S)

A step runs the decoder over the rows [0, n) that hold requests, one new token each, every row at
its own position: its RoPE angles, T5 bias row and causal limit are its own, and its keys beyond its
offset (or its source's length) are masked out. A request's rows leave as soon as it finishes: the
last rows move into the hole, so the running rows stay a prefix and a step reads views, not copies.
Each row keeps its own cross-attention keys (beams copy their example's), so nothing is shared
between requests and any row can leave at any step.

This is the canonical EncoderDecoder's step (models.encoder_decoder), with per-row positions in
place of one offset for the batch; the research families and the RNN are served one request at a
time instead (serving.scheduler). Buffers grow (doubling) as rows and lengths need, never shrink.

Shapes: R rows, K kv heads, L decoded positions, S source positions, D head dim, C model dim.
"""

from __future__ import annotations

import torch

from encdec.models.encoder_decoder import EncoderDecoder
from encdec.modules import additive_mask
from encdec.modules.blocks import AttentionInputs
from encdec.modules.kv_cache import LayerCache, StaticKVCache
from encdec.modules.masks import Packing


class RowSelfCache:
    """A layer's self-attention keys and values of rows at different offsets (Attention's cache protocol)."""

    frozen = False

    def __init__(self, slots: SlotBatch, layer: int):
        self.slots, self.layer = slots, layer

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (n, K, 1, D) of each row's next position -> every row's keys and values (n, K, L', D)."""
        s = self.slots
        n, rows, at = k.shape[0], s.row_index[: k.shape[0]], s.offsets[: k.shape[0]]
        keys, values = s.self_keys[self.layer], s.self_values[self.layer]
        keys[rows, :, at] = k[:, :, 0]
        values[rows, :, at] = v[:, :, 0]
        return keys[:n, :, : s.step_length], values[:n, :, : s.step_length]


class RowCrossCache(StaticKVCache):
    """A layer's cross-attention keys and values of the running rows: views of the slot buffers."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__(transposed=False)
        self.stored_keys, self.values = keys, values


class SlotBatch:
    """The slot buffers of one model and the per-row decoding step over the running rows."""

    def __init__(self, model: EncoderDecoder, rows: int = 8, length: int = 64, source: int = 64):
        self.model = model
        like = next(model.parameters())
        self.device, self.dtype = like.device, like.dtype
        blocks = model.decoder.blocks
        self.layers = len(blocks)
        attention = blocks[0].self_attn
        self.kv_heads, self.d_head = attention.n_kv_heads, attention.d_head
        self.self_keys: list[torch.Tensor] = []
        self.self_values: list[torch.Tensor] = []
        self.cross_keys: list[torch.Tensor] = []
        self.cross_values: list[torch.Tensor] = []
        self.capacity = (0, 0, 0)
        self.used = 0  # rows [0, used) hold requests
        self.offsets = torch.zeros(0, dtype=torch.long, device=self.device)
        self.source_lengths = torch.zeros(0, dtype=torch.long, device=self.device)
        self.cross_mask = torch.zeros(0, 1, 1, 0, dtype=self.dtype, device=self.device)
        self.row_index = torch.zeros(0, dtype=torch.long, device=self.device)
        self.step_length = 0
        self.ensure(rows, length, source)

    def ensure(self, rows: int, length: int, source: int) -> None:
        """Grow the buffers (doubling) to hold `rows` rows of `length` decoded and `source` source positions."""
        R, L, S = self.capacity
        if rows <= R and length <= L and source <= S:
            return
        R, L, S = (
            max(need, 2 * have) if need > have else have for need, have in zip((rows, length, source), (R, L, S))
        )
        K, D, n = self.kv_heads, self.d_head, self.used
        old = self.capacity

        def grown(buffers: list[torch.Tensor], size: int, filled: int) -> list[torch.Tensor]:
            made = []
            for i in range(self.layers):
                buffer = torch.zeros(R, K, size, D, dtype=self.dtype, device=self.device)  # zeros: masked, finite
                if i < len(buffers):
                    buffer[:n, :, :filled] = buffers[i][:n, :, :filled]
                made.append(buffer)
            return made

        self.self_keys = grown(self.self_keys, L, old[1])
        self.self_values = grown(self.self_values, L, old[1])
        self.cross_keys = grown(self.cross_keys, S, old[2])
        self.cross_values = grown(self.cross_values, S, old[2])
        blocked = torch.finfo(self.dtype).min
        mask = torch.full((R, 1, 1, S), blocked, dtype=self.dtype, device=self.device)
        mask[:n, :, :, : old[2]] = self.cross_mask[:n]
        self.cross_mask = mask
        self.offsets = torch.cat((self.offsets[:n], self.offsets.new_zeros(R - n)))
        self.source_lengths = torch.cat((self.source_lengths[:n], self.source_lengths.new_zeros(R - n)))
        self.row_index = torch.arange(R, device=self.device)
        self.capacity = (R, L, S)

    @torch.inference_mode()
    def add(self, sources: list[torch.Tensor], copies: list[int], max_length: int, bucket: int = 16) -> list[range]:
        """Encode `sources` (each (S_b,) token ids) in one packed pass and give example b `copies[b]` new rows (its
        beams or samples), each with the example's cross-attention keys, for decoding up to `max_length`
        positions. Returns each example's rows (they move when others leave: see `remove`).

        The sources lie end to end in one row, each attending within itself at positions counted from its
        start (the encoder's packed path, as training's objective.pack uses it): no padding is encoded, so
        four sources of 14 tokens cost 56 token rows, not the 4 x 32 of a padded batch. The row is padded
        to a multiple of `bucket` tokens so that few distinct shapes reach the kernels (each new one costs
        the CPU's kernels a slow first call)."""
        model, device = self.model, self.device
        lengths = torch.tensor([len(source) for source in sources], device=device)
        B, S, total = len(sources), int(lengths.max()), int(lengths.sum())
        width = -(-total // bucket) * bucket
        ids = torch.full((1, width), model.config.pad_id, dtype=torch.long, device=device)
        ids[0, :total] = torch.cat(sources).to(device)
        example = torch.repeat_interleave(torch.arange(B, device=device), lengths)  # (total,) each token's example
        starts = torch.cumsum(lengths, 0) - lengths
        positions = torch.zeros(1, width, dtype=torch.long, device=device)
        positions[0, :total] = torch.arange(total, device=device) - starts[example]
        segments = torch.zeros(1, width, dtype=torch.long, device=device)
        segments[0, :total] = example + 1
        nothing = segments.new_zeros(1, 0)
        memory = model.encode(ids, None, Packing(segments, nothing, positions, nothing))
        start, rows_needed = self.used, sum(copies)
        self.ensure(start + rows_needed, max_length, S)
        row_example = torch.repeat_interleave(torch.arange(B, device=device), torch.tensor(copies, device=device))
        # each example's tokens gathered into a padded (B, S) layout: token j of example b, or the last token
        k = torch.arange(S, device=device)
        gather = (
            starts[:, None] + torch.minimum(k[None, :], (lengths[:, None] - 1).clamp(min=0))
        ).flatten()  # (B * S,)
        rows = slice(start, start + rows_needed)
        for i, block in enumerate(model.decoder.blocks):
            keys, values = block.cross_attn.project_kv(memory.hidden, positions)  # (1, K, width, D)
            K, D = keys.shape[1], keys.shape[-1]
            keys = keys[0].index_select(1, gather).view(K, B, S, D).transpose(0, 1)  # (B, K, S, D)
            values = values[0].index_select(1, gather).view(K, B, S, D).transpose(0, 1)
            self.cross_keys[i][rows, :, :S] = keys[row_example]
            self.cross_values[i][rows, :, :S] = values[row_example]
            self.cross_keys[i][rows, :, S:] = 0
            self.cross_values[i][rows, :, S:] = 0
        blocked = torch.finfo(self.dtype).min
        self.cross_mask[rows] = blocked
        self.cross_mask[rows, 0, 0, :S] = additive_mask(k[None, :] < lengths[row_example, None], None, self.dtype)
        self.source_lengths[rows] = lengths[row_example]
        self.offsets[rows] = 0
        self.used += rows_needed
        firsts = [start + sum(copies[:b]) for b in range(B)]
        return [range(first, first + c) for first, c in zip(firsts, copies)]

    def remove(self, rows: list[int]) -> dict[int, int]:
        """Free `rows`; the last running rows move into them so the running rows stay a prefix.
        Returns {old row: new row} for the rows that moved."""
        gone = set(rows)
        keep_end = self.used - len(gone)
        holes = sorted(r for r in gone if r < keep_end)
        movers = [r for r in range(keep_end, self.used) if r not in gone]
        if holes:
            src = torch.tensor(movers, device=self.device)
            dst = torch.tensor(holes, device=self.device)
            filled = int(self.offsets[src].max()) + 1, int(self.source_lengths[src].max())  # copy only what is held
            for buffers, length in ((self.self_keys, filled[0]), (self.self_values, filled[0])):
                for buffer in buffers:
                    buffer[dst, :, :length] = buffer[src, :, :length]
            for buffers in (self.cross_keys, self.cross_values):
                for buffer in buffers:
                    buffer[dst, :, : filled[1]] = buffer[src, :, : filled[1]]
            for tensor in (self.offsets, self.source_lengths, self.cross_mask):
                tensor[dst] = tensor[src]
        self.used = keep_end
        return dict(zip(movers, holes))

    def reorder(self, rows: list[int], order: list[int]) -> None:
        """Row rows[i] takes the self-attention cache of rows[order[i]] (beam search's reorder)."""
        if order == list(range(len(order))):
            return
        dst = torch.tensor(rows, device=self.device)
        src = dst[torch.tensor(order, device=self.device)]
        for buffers in (self.self_keys, self.self_values):
            for buffer in buffers:
                buffer[dst] = buffer[src]
        self.offsets[dst] = self.offsets[src]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (n,) the next token of running rows [0, n) -> logits (n, V); each row's offset advances."""
        model, decoder = self.model, self.model.decoder
        n = tokens.shape[0]
        offsets = self.offsets[:n]
        self.ensure(n, int(offsets.max()) + 1, 0)
        self.step_length = int(offsets.max()) + 1
        pos = offsets[:, None]  # (n, 1): each row's own position
        x = decoder.embed_tokens(tokens[:, None], pos)
        keys = torch.arange(self.step_length, device=self.device)
        allowed = (keys[None, :] <= offsets[:, None])[:, None, None, :]  # (n, 1, 1, L')
        bias = None
        if decoder.position_bias is not None:  # T5: each row's bias row, relative to its own position
            bias = decoder.position_bias(offsets, keys).permute(2, 1, 0, 3)  # (1, H, n, L') -> (n, H, 1, L')
        blocked = torch.finfo(x.dtype).min  # additive_mask's value, without its per-call shape arithmetic
        if bias is None:
            mask = torch.zeros(allowed.shape, dtype=x.dtype, device=self.device).masked_fill_(~allowed, blocked)
        else:
            mask = bias.to(x.dtype).masked_fill(~allowed, blocked)
        self_inputs = AttentionInputs(mask=mask, q_pos=pos, k_pos=pos)
        q_pos = pos + self.source_lengths[:n, None] if decoder.rope_cross == "prepended" else pos
        S = int(self.source_lengths[:n].max())  # keys past every running row's source are never read
        cross_inputs = AttentionInputs(mask=self.cross_mask[:n, :, :, :S], q_pos=q_pos)
        caches = [
            LayerCache(
                RowSelfCache(self, i), RowCrossCache(self.cross_keys[i][:n, :, :S], self.cross_values[i][:n, :, :S])
            )
            for i in range(self.layers)
        ]
        memory = x.new_zeros(n, 0, x.shape[-1])  # unread: every cross-attention cache is filled
        hidden, _ = decoder.run_blocks(x, memory, self_inputs, cross_inputs, _Caches(caches))
        self.offsets[:n] += 1
        return model.head(hidden)[:, -1].float()


class _Caches:
    """The layer caches `run_blocks` reads, by index."""

    def __init__(self, layers: list[LayerCache]):
        self.layers = layers
