"""What every attention kind declares (`AttentionKind`), and how a layer's kinds compose (`LayerKinds`).

    rule(q, k)      which keys a query sees, elementwise on broadcast positions (True: attend): FlexAttention's
                    `mask_mod` calls the same function on its indices (`mask_mod`)
    band            how far from its query a key may lie at most (None: anywhere): the chunked long-input path
                    (modules.chunked_attention's LazyMask) reads only the keys within it, and a block mask would
                    skip the blocks beyond it
    bias(q, k)      an additive term of the scores, (1 or B, H, T, S) (T5's relative bias: a `score_mod`)
    rotary          a rotation of queries and keys by position (RoPE)
    extra_keys      keys beside the own ones (a transient-global attention's block keys, a merged one's memory)
    in_blocks       whether a band of the kind can be attended by blocks (modules.blocked_band): its rule and bias
                    read k - q alone, laid out once for every block (LongT5's global keys are joined there too)
    parameters()    the parameters the kind itself holds (a bias table: buckets x heads)

`layer_mask` folds a layer's kinds into the additive mask of a span of queries and keys (the whole sequence, or
a chunk of rows), on top of what a batch allows (padding, packing); `layer_band` is the band the chunked path
reads. A decode step's mask folds the same rules (`layer_allows`) over each row's query columns and the written
ones, with the layer's bias tabulated once per width (modules.decode_state).

Shapes: B batch, H heads, T queries, S keys.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from encdec.errors import ConfigError, listed
from encdec.modules.attention import additive_mask


@dataclass(frozen=True)
class AttentionKind:
    """What every kind has unless it says otherwise: no rule, no band, no bias, no rotation, no parameters.
    `masks`: whether its rule or bias changes the scores (a layer of causality alone, RoPE aside, takes SDPA's
    mask-free causal path)."""

    band = None
    rotary = None
    extra_keys = False
    masks = False
    in_blocks = True

    def rule(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
        """q, k: positions broadcast against each other, (..., T, 1) and (..., 1, S) -> bool, True to attend."""
        return None

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """q_pos (T,), k_pos (S,) -> (1, H, T, S) additive scores, or None."""
        return None

    def score(self, score: torch.Tensor, head: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """`bias` as FlexAttention's score_mod reads it: one score of head `head`, query q, key k -> the score with
        the term added (unchanged without a bias)."""
        return score

    def parameters(self) -> int:
        return 0

    @classmethod
    def declared(cls, settings: dict, heads: int, causal: bool, key: str) -> "AttentionKind":
        """The kind a config names (model.attention.kinds: {name: settings}) for a stack of `heads` heads, causal
        or not, its settings checked by its own declaration; a kind built from the model's own settings (a mask,
        T5's bias, RoPE) is not named."""
        raise ConfigError(f"{key} is not a kind a config names; it follows from the model's own settings")


LayerKinds = tuple[AttentionKind, ...]


@dataclass(eq=False)
class ExtraKeys:
    """G keys after a layer's own: `sees(b, q, g)` -> bool and `score(score, b, h, q, g)` -> the score with its
    term; `own(b, k)` -> bool: whether the own key k stays a key (Longformer's global tokens are keys after the
    band instead). What a kind with extra keys gives FlexAttention (modules.flex_attention.FlexMask)."""

    count: int
    sees: Callable
    score: Callable | None = None
    own: Callable | None = None
    rows: int | None = None  # the batch `sees` varies over (None: one for every row)


def layer_rule(kinds: LayerKinds, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
    """q_pos (T,), k_pos (S,) -> (1, 1, T, S) bool: the keys every kind of the layer lets a query see; None where
    none restricts them."""
    allowed = layer_allows(kinds, q_pos[:, None], k_pos[None, :])
    return None if allowed is None else allowed[None, None]


def layer_allows(kinds: LayerKinds, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    """q, k: positions broadcast against each other (a decode step's: each row's query column over the written
    ones) -> bool, True where every kind of the layer lets the query see the key; None where none restricts."""
    allowed = None
    for kind in kinds:
        seen = kind.rule(q, k)
        if seen is not None:
            allowed = seen if allowed is None else allowed & seen
    return allowed


def layer_bias(kinds: LayerKinds, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
    """The sum of the layer's position terms of the scores, (1, H, T, S); None without any."""
    total = None
    for kind in kinds:
        term = kind.bias(q_pos, k_pos)
        if term is not None:
            total = term if total is None else total + term
    return total


def layer_mask(
    kinds: LayerKinds, allowed: torch.Tensor | None, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype
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


def layer_in_blocks(kinds: LayerKinds) -> bool:
    """Whether a band of the layer can be attended by blocks (modules.blocked_band): every kind's `in_blocks`."""
    return all(kind.in_blocks for kind in kinds)


def mask_mod(kinds: LayerKinds) -> Callable:
    """The layer's rule as FlexAttention's mask_mod(b, h, q_idx, kv_idx) -> bool (torch.nn.attention.
    flex_attention.create_block_mask makes its block mask of it): the very rules the dense and chunked masks
    fold."""

    def allowed(b, h, q_idx, kv_idx):
        seen = q_idx >= 0
        for kind in kinds:
            rule = kind.rule(q_idx, kv_idx)
            if rule is not None:
                seen = seen & rule
        return seen

    return allowed


def score_mod(kinds: LayerKinds) -> Callable:
    """The layer's position terms as FlexAttention's score_mod(score, b, h, q_idx, kv_idx): each kind's `score`,
    the same terms as its dense `bias`."""

    def scored(score, b, h, q_idx, kv_idx):
        for kind in kinds:
            score = kind.score(score, h, q_idx, kv_idx)
        return score

    return scored


def declared_kinds(kinds: dict[str, dict], heads: int, causal: bool, table: dict[str, type[AttentionKind]]):
    """The kinds model.attention.kinds names ({name: settings}), looked up in `table` (KINDS), for a stack of `heads`
    heads, causal or not."""
    made = []
    for name, settings in kinds.items():
        if name not in table:
            raise ConfigError(f"model.attention.kinds names no kind {name!r}; kinds: {listed(sorted(table))}")
        made.append(table[name].declared(settings, heads, causal, f"model.attention.kinds.{name}"))
    return tuple(made)


def find(kinds: LayerKinds, kind: type[AttentionKind]) -> AttentionKind | None:
    """The layer's kind of type `kind`, or None."""
    return next((k for k in kinds if isinstance(k, kind)), None)
