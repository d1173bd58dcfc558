"""A decoder step whose shapes never change, for torch.compile and CUDA graphs (issue 16).

The eager step (`EncoderDecoder.step`) grows its self-attention caches by one position
per step and slices T5's bias with a Python offset, so every step has new shapes.
Here every tensor a step touches is allocated once per (rows, examples, length bucket,
source bucket): the self-attention keys and values are (R, K, L, D) buffers, the new
position's written at `pos`, a (1,) long tensor on the device, and attention runs over
the whole buffer with the positions after `pos` blocked; T5's relative bias is
computed for all L positions once and its row chosen by `index_select(pos)`; RoPE and
absolute positions read `pos` as a tensor; cross-attention reads fixed key and value
buffers, padded to the source bucket and masked there. Beam reorders
gather into the same buffers. Nothing reads a device value on the host, so the step
can be captured once and replayed.

Blocked keys get a score of fp32's most negative number, whose softmax weight is
exactly 0, so the logits equal the eager step's up to the order of the sums (about 1e-6).

Shapes: R rows (B examples times N beams or samples), B examples, K kv heads,
L length bucket (positions), S source bucket, D head dim, H heads, V vocabulary.
"""

import torch

from encdec.modules import AttentionInputs, additive_mask
from encdec.modules.kv_cache import LayerCache, StaticKVCache


class PositionedKVCache:
    """A self-attention cache of fixed size: `append` writes the step's keys and values at `pos`
    and returns the whole (R, K, L, D) buffers, the unwritten positions masked by the caller."""

    frozen = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, pos: torch.Tensor):
        self.keys, self.values, self.pos = keys, values, pos

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (R, K, 1, D) -> the buffers (R, K, L, D), written in place at `pos`."""
        self.keys.index_copy_(2, self.pos, k)
        self.values.index_copy_(2, self.pos, v)
        return self.keys, self.values


class FixedCrossCache(StaticKVCache):
    """Cross-attention keys and values (B, K, S, D) in fixed buffers, the keys stored transposed or not
    (see StaticKVCache)."""

    def __init__(self, stored_keys: torch.Tensor, values: torch.Tensor, transposed: bool):
        super().__init__(transposed)
        self.stored_keys, self.values = stored_keys, values


class FixedSteps:
    """The buffers of fixed-shape decoding for one shape key, reused by every generate call of that shape.

    `load` fills them from an eager `EncoderDecoderState` (the encoder has run), `step` runs one
    position of every row. `run` is the step's tensor function; `encdec.generation.compiled`
    compiles or captures it.
    """

    def __init__(self, model, rows: int, examples: int, length: int, source: int, like: torch.Tensor):
        blocks = model.decoder.blocks
        K, D = blocks[0].self_attn.n_kv_heads, blocks[0].self_attn.d_head
        zeros = dict(dtype=like.dtype, device=like.device)
        self.model, self.rows, self.examples, self.length, self.source = model, rows, examples, length, source
        self.beams = rows // examples
        self.self_k = [torch.zeros(rows, K, length, D, **zeros) for _ in blocks]  # (R, K, L, D)
        self.self_v = [torch.zeros(rows, K, length, D, **zeros) for _ in blocks]
        cross = blocks[0].cross_attn
        Kc, Dc = cross.n_kv_heads, cross.d_head
        self.transposed = self.beams > 1 and like.device.type == "cpu"  # the keys' layout, as in StaticKVCache
        key_shape = (examples, Kc, Dc, source) if self.transposed else (examples, Kc, source, Dc)
        self.cross_k = [torch.zeros(key_shape, **zeros) for _ in blocks]  # (B, K, D, S) or (B, K, S, D)
        self.cross_v = [torch.zeros(examples, Kc, source, Dc, **zeros) for _ in blocks]  # (B, K, S, D)
        self.cross_mask = torch.zeros(examples, 1, 1, source, **zeros)  # additive (B, 1, 1, S)
        self.positions = torch.arange(length, device=like.device)  # (L,)
        self.pos = torch.zeros(1, dtype=torch.long, device=like.device)  # the position the next step writes
        self.filled = 0  # the same count on the host: positions written, which reorders gather
        self.tokens = torch.zeros(rows, 1, dtype=torch.long, device=like.device)  # (R, 1) the step's input
        self.self_bias = None  # (1, H, L, L) T5's relative bias
        if model.decoder.position_bias is not None:
            with torch.no_grad():
                self.self_bias = model.decoder.position_bias(self.positions, self.positions).to(like.dtype).contiguous()
        self.prepended = None  # (R, 1) source lengths, where decoder positions continue after the source
        if model.decoder.rope_cross == "prepended":
            self.prepended = torch.zeros(rows, 1, dtype=torch.long, device=like.device)

    def load(self, state) -> None:
        """Take a fresh eager state's cross-attention caches, mask and offsets; start at position 0."""
        S = state.memory.hidden.shape[1]
        blocked = torch.finfo(self.cross_mask.dtype).min
        self.cross_mask.fill_(blocked)
        if state.cross_mask is not None:
            self.cross_mask[..., :S].copy_(state.cross_mask)
        else:
            self.cross_mask[..., :S].zero_()
        for layer, k, v in zip(state.cache.layers, self.cross_k, self.cross_v):
            keys = k.transpose(-1, -2) if self.transposed else k  # (B, K, S, D) views of the buffer
            keys[:, :, :S].copy_(layer.cross_attn.keys)
            v[:, :, :S].copy_(layer.cross_attn.values)
        if self.prepended is not None:
            self.prepended.copy_(state.prepended_offset)
        self.pos.zero_()
        self.filled = 0

    def run(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tokens (R, 1) at position pos (1,) -> logits (R, V); writes the position into the buffers."""
        model = self.model
        decoder = model.decoder
        x = decoder.embed_tokens(tokens, pos)  # (R, 1, C)
        allowed = (self.positions <= pos)[None, None, None, :]  # (1, 1, 1, L)
        bias = self.self_bias.index_select(2, pos) if self.self_bias is not None else None  # (1, H, 1, L)
        self_inputs = AttentionInputs(mask=additive_mask(allowed, bias, x.dtype), q_pos=pos, k_pos=pos)
        q_pos = pos if self.prepended is None else self.prepended + pos  # (1,) or (R, 1)
        cross_inputs = AttentionInputs(mask=self.cross_mask, q_pos=q_pos, query_groups=self.beams)
        layers = [
            LayerCache(PositionedKVCache(k, v, pos), FixedCrossCache(ck, cv, self.transposed))
            for k, v, ck, cv in zip(self.self_k, self.self_v, self.cross_k, self.cross_v)
        ]
        hidden = x
        for block, layer in zip(decoder.blocks, layers):
            hidden, _ = block(hidden, None, self_inputs, cross_inputs, layer)
        hidden = decoder.dropout(decoder.final_norm(hidden))
        return model.head(hidden)[:, -1]

    def advance(self) -> None:
        """Move on to the next position, on the device and on the host."""
        self.pos += 1
        self.filled += 1

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (R,): the written positions gathered into the same buffers (their addresses,
        which a CUDA graph holds, never change)."""
        n = self.filled
        for buf in (*self.self_k, *self.self_v):
            buf[:, :, :n].copy_(buf[:, :, :n].index_select(0, index))
