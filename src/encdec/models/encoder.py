"""The encoder-decoder's encoder stack: embeddings, self-attention blocks, final norm. Its masks are made once
per batch (`SelfMasks`), by layer and, for long inputs, by rows of queries (modules.chunked_attention).

Shapes: B batch, S source length, C model dim, H heads, G global keys.
"""

from functools import partial

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.models.components import (
    build_encoder_block,
    build_final_norm,
)
from encdec.models.encoder_flex import flex_inputs
from encdec.models.model_config import ModelConfig
from encdec.models.outputs import EncoderOutput
from encdec.models.stack import Stack
from encdec.modules import (
    AttentionInputs,
    Dropout,
    Packing,
    RelativePositionBias,
    RotaryEmbedding,
)
from encdec.modules.attention import blocked_value
from encdec.modules.attention_kinds import (
    GlobalTokenKeys,
    TransientGlobal,
    find,
    layer_band,
    layer_in_blocks,
    layer_mask,
)
from encdec.modules.blocked_band import BandBlocks, band_pattern, blocked_scores
from encdec.modules.blocks import for_layer
from encdec.modules.chunked_attention import LazyMask, chunk_scores
from encdec.modules.global_tokens import global_token_rows
from encdec.modules.masks import same_segment
from encdec.modules.transient_global import transient_globals


class Encoder(Stack):
    def __init__(
        self, cfg: ModelConfig, embed: nn.Embedding, rotary: RotaryEmbedding | None, local_rotary=None
    ) -> None:
        super().__init__(cfg, embed, bidirectional=True)
        self.image_token_id = cfg.image_tokens.image_token_id
        self.local_radius = cfg.attention.local_radius if cfg.attention.encoder != "full" else None
        if cfg.attention.encoder == "local_global" and cfg.attention.global_tokens != "none":
            self.global_rule = cfg.attention.global_tokens
        self.long_scores = LONG_SCORES
        if cfg.attention.encoder == "transient_global":
            buckets, distance = cfg.positions.relative_buckets, cfg.positions.relative_max_distance
            self.global_bias = RelativePositionBias(cfg.n_heads, True, buckets, distance)  # every layer reads it
        self.blocks = nn.ModuleList(
            build_encoder_block(cfg, local_rotary if self.sliding[i] else rotary, sparse=cfg.moe_layer(i))
            for i in range(cfg.n_encoder_layers)
        )
        self.final_norm = build_final_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.rotary = rotary

    def forward(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None, packing: Packing | None = None
    ) -> EncoderOutput:
        """src_ids (B, S), src_mask (B, S) bool -> memory (B, S, C). A packed batch's examples attend
        within themselves, at positions counted from 0 in each."""
        S = src_ids.shape[1]
        if self.image_token_id is not None and bool((src_ids == self.image_token_id).any()):
            raise DataError(
                f"the input holds the image token (id {self.image_token_id}); encdec reads this model's text alone, "
                "without its vision tower"
            )
        row = torch.arange(S, device=src_ids.device)
        pos = packing.src_positions if packing is not None else row  # (B, S) or (S,)
        x = self.embed_tokens(src_ids, pos if packing is not None else self.whole_positions(src_ids, row))
        return self.blocks_over(x, src_mask, packing, pos)

    def blocks_over(
        self, x: torch.Tensor, src_mask: torch.Tensor | None, packing: Packing | None, pos: torch.Tensor
    ) -> EncoderOutput:
        """The blocks and the final norm over embedded inputs x (B, S, C) at positions pos (S,) or (B, S): what
        follows the embedding, whichever front end made it (a token table, Whisper's convolutional stem)."""
        row = torch.arange(x.shape[1], device=x.device)
        inputs = self.attention_inputs(SelfMasks(self, src_mask, packing, row, pos, x))
        router_logits = []
        for i, block in enumerate(self.blocks):
            x, logits = block(x, for_layer(inputs, i), real=src_mask)
            if logits is not None:
                router_logits.append(logits)
        return EncoderOutput(self.dropout(self.final_norm(x)), src_mask, router_logits)

    def attention_inputs(self, masks: "SelfMasks") -> list[AttentionInputs]:
        """Each layer's self-attention inputs: its mask whole, one tensor for the layers that read the same (T5's
        bias, a window), or a LazyMask that makes the part a chunk of queries reads (modules.chunked_attention),
        memory linear in the input: where the scores of a layer would hold LONG_SCORES or more numbers, and for a
        layer whose keys lie within a band (LongT5's local attention, a sliding window) where the band's keys are
        at most an eighth of them, compute linear in the input too (by blocks of the band where its kinds allow,
        modules.blocked_band)."""
        B, S = masks.x.shape[:2]
        heads = self.blocks[0].self_attn.n_heads
        G = masks.extra_keys()
        made, by_kind, flex = [], {}, flex_inputs(self, masks)  # FlexAttention's, where a layer takes it
        for i in range(len(self.blocks)):
            if flex[i] is not None:
                made.append(flex[i])
                continue
            band = masks.band(i)
            if self.by_chunks(B * heads, S, band, G) and not self.fused(i, masks.packing is not None):
                blocks = masks.blocks(i, band) if band is not None else None
                made.append(LazyMask(partial(masks.rows, i), S, band, G, blocks))
                continue
            kinds = self.self_kinds(i)  # layers of one kind share their mask
            if kinds not in by_kind:
                by_kind[kinds] = masks.rows(i, 0, S, 0, S)
            made.append(by_kind[kinds])
        return [
            m
            if isinstance(m, AttentionInputs)
            else AttentionInputs(
                mask=m, q_pos=masks.pos, k_pos=masks.pos, global_keys=masks.globals, global_tokens=masks.tokens
            )
            for m in made
        ]

    def by_chunks(self, heads: int, S: int, band: int | None, G: int) -> bool:
        """Whether a layer attends by chunks of queries: for `heads` (B x H) over S tokens and G global keys, its
        scores would hold long_scores numbers or more, or its keys lie within a band of at most 1 / BAND_SHARE."""
        return heads * S * (S + G) >= self.long_scores or (band is not None and S >= BAND_SHARE * (2 * band + 1))

    def fused(self, layer: int, packed: bool) -> bool:
        """Whether layer `layer`'s attention runs whole in SDPA's fused kernel, which never holds its scores (so
        long inputs need no chunks of queries): without gradients, no kind of the layer changing a score or adding
        keys (its mask is padding alone, (B, 1, 1, S)), the batch not `packed`, no cap on the scores and no
        probabilities recorded, on the CPU (a GPU's kernels for such a mask are not yet measured here: the GPU
        verification issue). Chunks there cost time alone: Whisper base's encoder over 8 windows of 30 s took
        5.1 s by chunks of 87 queries against 3.7 s whole (the profiler's CPU time, 2 threads, a Xeon with AMX)."""
        attention = self.blocks[layer].self_attn
        plain = not any(kind.masks or kind.extra_keys for kind in self.self_kinds(layer))
        whole = attention.softcap is None and attention.recorded is None
        on_cpu = next(self.parameters()).device.type == "cpu"  # an int8 attention's projections hold no parameters
        return plain and whole and on_cpu and not packed and not torch.is_grad_enabled()

    def score_numbers(self, batch: int, S: int) -> int:
        """The most numbers of attention scores one layer holds at once for `batch` inputs of S tokens, by the
        path each layer takes (`by_chunks`): the whole scores, or one chunk's; what a generation's fit check
        counts for the encoder."""
        heads = batch * self.blocks[0].self_attn.n_heads if len(self.blocks) else 0
        G = -(-S // self.global_block_size) if self.global_bias is not None else int(self.global_rule is not None)
        peaks = [0]
        for i in range(len(self.blocks)):
            band = self.band(i)
            if not self.by_chunks(heads, S, band, G):
                peaks.append(heads * S * (S + G))
            elif self.fused(i, packed=False):
                continue  # SDPA's fused kernel holds no scores
            elif band is not None and layer_in_blocks(self.self_kinds(i)):
                peaks.append(blocked_scores(heads, S, band, G))
            else:
                peaks.append(chunk_scores(heads, S, band, G))
        return max(peaks)

    def band(self, layer: int) -> int | None:
        """How far from itself a query of layer `layer` may see a key, at most: its kinds' narrowest band (LongT5's
        radius, a sliding window's width, in rows: a window counts positions inside one packed example); None:
        anywhere."""
        return layer_band(self.self_kinds(layer))


LONG_SCORES = 1 << 27  # numbers in a layer's scores (512 MiB in float32) from which the encoder attends by chunks
BAND_SHARE = 8  # a banded layer attends by chunks of its band where the band holds at most 1 / BAND_SHARE of the keys


class SelfMasks:
    """The encoder's self-attention masks of one batch, by layer and by rows of queries: padding or packing, and
    what each layer's kinds declare (Encoder.self_kinds: LongT5's local band, T5's relative bias (UMT5's a
    layer), Gemma's sliding window, LongT5's global keys, Longformer's global tokens)."""

    def __init__(
        self,
        encoder: "Encoder",
        src_mask: torch.Tensor | None,
        packing: Packing | None,
        row: torch.Tensor,
        pos: torch.Tensor,
        x: torch.Tensor,
    ):
        self.encoder, self.src_mask, self.packing, self.row, self.pos, self.x = encoder, src_mask, packing, row, pos, x
        self.globals = self.tokens = None
        self.patterns = {}  # (kinds, band) -> the pattern of a block (modules.blocked_band), made once a forward
        if encoder.global_bias is None and encoder.global_rule is None:
            return
        if packing is not None and encoder.global_bias is not None:
            raise ConfigError("a transient-global encoder cannot read a packed batch: its blocks would span examples")
        if packing is not None:
            raise ConfigError(
                "an encoder with global tokens cannot read a packed batch: they would be the row's, not each example's"
            )
        B, S = x.shape[:2]
        self.real = src_mask if src_mask is not None else torch.ones(B, S, dtype=torch.bool, device=x.device)
        if encoder.global_bias is not None:
            self.globals = transient_globals(self.real, encoder.global_block_size, encoder.global_bias)
        else:
            self.tokens = global_token_rows(self.real, encoder.global_rule)

    def extra_keys(self) -> int:
        """How many keys every layer attends after its own: LongT5's blocks', the global tokens', or none."""
        extra = self.globals or self.tokens
        return extra.count if extra is not None else 0

    def band(self, layer: int) -> int | None:
        """The encoder's band for layer `layer`, narrowed by a packed batch's longest source (a token sees only
        its own source's, none farther than that away), so that many sources packed end to end (the server's
        joins) attend by chunks of their band, not with the whole square of the row."""
        bands = [self.encoder.band(layer)]
        if self.packing is not None and self.packing.src_longest is not None:
            bands.append(self.packing.src_longest - 1)
        bands = [band for band in bands if band is not None]
        return min(bands) if bands else None

    def blocks(self, layer: int, band: int) -> BandBlocks | None:
        """Layer `layer`'s mask as the blocks of its band read it (modules.blocked_band): the pattern its kinds lay
        out (shared by the layers of one kind, a bias's gradient reaching its table once), which keys are real
        or, packed, in the query's example, and LongT5's global keys' mask by rows; None where a kind cannot be
        attended by blocks."""
        kinds = self.encoder.self_kinds(layer)
        if not layer_in_blocks(kinds):
            return None
        dtype, device = self.x.dtype, self.x.device
        if (kinds, band) not in self.patterns:
            self.patterns[kinds, band] = band_pattern(lambda q, k: layer_mask(kinds, None, q, k, dtype), band, device)
        if self.packing is not None:
            keys = queries = self.packing.src_segments
        else:
            real = self.src_mask if self.src_mask is not None else torch.ones(1, self.x.shape[1], device=device)
            keys, queries = real.long(), None
        global_keys = find(kinds, TransientGlobal)
        side = partial(global_keys.side, self.real, self.globals, dtype=dtype) if global_keys is not None else None
        return BandBlocks(band + 1, self.patterns[kinds, band], keys, queries, blocked_value(dtype, device.type), side)

    def rows(self, layer: int, t0: int, t1: int, k0: int, k1: int) -> torch.Tensor | None:
        """Layer `layer`'s additive mask for query rows t0..t1 over keys k0..k1: (B or 1, H or 1, t1 - t0,
        k1 - k0), with every global key's column after them (B, H, t1 - t0, k1 - k0 + G); None where nothing is
        masked."""
        q_row, k_row = self.row[t0:t1], self.row[k0:k1]
        if self.packing is not None:  # a token sees its own example's
            segments = self.packing.src_segments
            allowed = same_segment(segments[:, t0:t1], segments[:, k0:k1])  # (B, 1, rows, keys)
        else:
            allowed = self.src_mask[:, None, None, k0:k1] if self.src_mask is not None else None  # (B, 1, 1, keys)
        kinds = self.encoder.self_kinds(layer)
        tokens = find(kinds, GlobalTokenKeys)
        if tokens is not None:  # the global tokens are keys after the band's, not in it
            allowed = tokens.own(allowed, self.tokens, k0, k1)
        mask = layer_mask(kinds, allowed, q_row, k_row, self.x.dtype)  # (B or 1, H or 1, rows, keys)
        global_keys = find(kinds, TransientGlobal) or tokens
        if global_keys is None:
            return mask
        side = global_keys.side(self.real, self.globals or self.tokens, t0, t1, self.x.dtype)  # (B, H or 1, rows, G)
        rows = torch.broadcast_shapes(mask.shape[:3], side.shape[:3])  # a bias's heads beside the side's one
        return torch.cat([mask.expand(*rows, mask.shape[-1]), side.expand(*rows, side.shape[-1])], dim=-1)
