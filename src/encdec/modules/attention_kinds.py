"""Attention kinds: each a small declared component that owns its rule, composed per layer.

A layer's attention is a tuple of kinds (`LayerKinds`), for example T5's encoder `(Full(), RelativeBias(b))`,
LongT5's `(Band(127), RelativeBias(b), TransientGlobal(16, g))`, Gemma 2's sliding decoder layer
`(Causal(), Band(4096, causal=True), Rope(r))`. Each kind says, where it has one:

    rule(q, k)      which keys a query sees, elementwise on broadcast positions (True: attend): a FlexAttention
                    `mask_mod` reads the same function on its indices
    band            how far from its query a key may lie at most (None: anywhere): the chunked long-input path
                    (LazyMask) reads only the keys within it, and a block mask would skip the blocks beyond it
    bias(q, k)      an additive term of the scores, (1 or B, H, T, S) (T5's relative bias: a `score_mod`)
    rotary          a rotation of queries and keys by position (RoPE; a local theta or a scaling is the table's)
    extra_keys      keys beside the own ones: a transient-global attention's block keys, a merged attention's memory
    parameters      the parameters the kind itself holds (a bias table: buckets x heads)

`layer_mask` folds a layer's kinds into the additive mask of a span of queries and keys (the whole sequence, or
a chunk of rows: modules.chunked_attention), on top of what a batch allows (padding, packing); `layer_band`
is the band the chunked path reads. `KINDS` is the table of every kind by name: adding a variant is one file
and one entry there.

Shapes: B batch, H heads, T queries, S keys.
"""

from dataclasses import dataclass

import torch
from torch import nn

from encdec.modules.attention import additive_mask


@dataclass(frozen=True)
class AttentionKind:
    """What every kind has unless it says otherwise: no rule, no band, no bias, no rotation, no parameters."""

    band = None
    rotary = None
    extra_keys = False

    def rule(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
        """q, k: positions broadcast against each other, (..., T, 1) and (..., 1, S) -> bool, True to attend."""
        return None

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """q_pos (T,), k_pos (S,) -> (1, H, T, S) additive scores, or None."""
        return None

    def parameters(self) -> int:
        return 0


@dataclass(frozen=True)
class Full(AttentionKind):
    """Every key (an encoder's, a cross-attention's)."""


@dataclass(frozen=True)
class Causal(AttentionKind):
    """Keys at or before the query (a decoder's self-attention)."""

    def rule(self, q, k):
        return k <= q


@dataclass(frozen=True)
class Band(AttentionKind):
    """Keys near the query: causal, the `width` newest up to it, q - k < width (Gemma 2's sliding window);
    each side, at most `width` away, |q - k| <= width (LongT5's local radius, T5Gemma's encoder window); split,
    `width` keys in all, (width + 1) // 2 back counting the query's own and width // 2 ahead (T5Gemma 2's)."""

    width: int
    causal: bool = False
    split: bool = False

    @property
    def band(self) -> int:
        return self.width

    def rule(self, q, k):
        distance = q - k
        if self.causal:
            return distance < self.width
        if self.split:
            return (distance >= -(self.width // 2)) & (distance < (self.width + 1) // 2)
        return distance.abs() <= self.width


@dataclass(frozen=True)
class RelativeBias(AttentionKind):
    """T5's learned bias of k - q, bucketed (modules.positions.RelativePositionBias): one module every layer of a
    stack shares (T5's, the same object in each layer's kinds) or one per layer (UMT5's)."""

    table: nn.Module

    def bias(self, q_pos, k_pos):
        return self.table(q_pos, k_pos)

    def parameters(self) -> int:
        return self.table.embed.weight.numel()


@dataclass(frozen=True)
class Rope(AttentionKind):
    """Queries and keys rotated by their positions (modules.positions.RotaryEmbedding: a global or a local
    theta, a linear scaling); no mask, no parameters."""

    rotary: nn.Module


@dataclass(frozen=True)
class TransientGlobal(AttentionKind):
    """LongT5's global keys (modules.transient_global): one key per `block_size` tokens, the block's summed
    states normed by the attention's `global_norm`, seen by every real token through `table`, a relative bias
    of k - its block."""

    block_size: int
    table: nn.Module
    extra_keys = True

    def parameters(self) -> int:
        return self.table.embed.weight.numel()

    def side(self, real: torch.Tensor, globals_, t0: int, t1: int, dtype: torch.dtype) -> torch.Tensor:
        """The mask of query rows t0..t1 over the G global keys: (B, H, t1 - t0, G)."""
        blocks, keys = globals_.positions()
        sees = (real[:, t0:t1, None] == globals_.real[:, None, :])[:, None]  # (B, 1, rows, G)
        return additive_mask(sees, self.table(blocks[:, t0:t1], keys), dtype)


@dataclass(frozen=True)
class Merged(AttentionKind):
    """A decoder self-attention that reads the memory too, one softmax over its own keys and the encoder's
    (T5Gemma 2's; modules.blocks.DecoderBlock without a cross-attention)."""

    extra_keys = True


LayerKinds = tuple[AttentionKind, ...]

# every kind by name: what a config or a family names, and where a new variant adds its entry
KINDS: dict[str, type[AttentionKind]] = {
    "full": Full,
    "causal": Causal,
    "band": Band,
    "relative_bias": RelativeBias,
    "rope": Rope,
    "transient_global": TransientGlobal,
    "merged": Merged,
}


def layer_rule(kinds: LayerKinds, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
    """q_pos (T,), k_pos (S,) -> (1, 1, T, S) bool: the keys every kind of the layer lets a query see; None where
    none restricts them."""
    q, k = q_pos[:, None], k_pos[None, :]
    allowed = None
    for kind in kinds:
        seen = kind.rule(q, k)
        if seen is not None:
            allowed = seen if allowed is None else allowed & seen
    return None if allowed is None else allowed[None, None]


def layer_bias(kinds: LayerKinds, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
    """The sum of the layer's position terms of the scores, (1, H, T, S); None without any."""
    total = None
    for kind in kinds:
        term = kind.bias(q_pos, k_pos)
        if term is not None:
            total = term if total is None else total + term
    return total


def layer_mask(
    kinds: LayerKinds,
    allowed: torch.Tensor | None,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """The additive mask of queries at q_pos (T,) over keys at k_pos (S,) (row positions: a packed batch's
    segments are in `allowed`): what `allowed` (bool, broadcastable to (B, 1, T, S); None: all) and every kind
    allow, with the kinds' bias; None where nothing is masked or added."""
    rule = layer_rule(kinds, q_pos, k_pos)
    if rule is not None:
        allowed = rule if allowed is None else allowed & rule
    return additive_mask(allowed, layer_bias(kinds, q_pos, k_pos), dtype)


def layer_band(kinds: LayerKinds) -> int | None:
    """The narrowest band of the layer's kinds: no key farther than this from its query; None: anywhere."""
    bands = [kind.band for kind in kinds if kind.band is not None]
    return min(bands) if bands else None


def only_causal(kinds: LayerKinds) -> bool:
    """Whether the layer's mask is causality alone (SDPA's mask-free causal path serves it)."""
    return any(isinstance(kind, Causal) for kind in kinds) and all(isinstance(kind, (Causal, Rope)) for kind in kinds)


def find(kinds: LayerKinds, kind: type[AttentionKind]) -> AttentionKind | None:
    """The layer's kind of type `kind`, or None."""
    return next((k for k in kinds if isinstance(k, kind)), None)
