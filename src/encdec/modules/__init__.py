"""Family-agnostic building blocks. They take plain arguments; only model builders read configs."""

from encdec.modules.attention import Attention, AttentionInputs, additive_mask, causal_mask
from encdec.modules.blocks import DecoderBlock, EncoderBlock
from encdec.modules.decode_state import DecodeState
from encdec.modules.dropout import Dropout, dropout
from encdec.modules.feed_forward import FeedForward
from encdec.modules.kv_cache import LayerCache, StaticKVCache
from encdec.modules.layer_caches import CrossAttentionCache, LayerState, SelfAttentionCache, StateBag
from encdec.modules.masks import Packing, as_bool_mask, within_window
from encdec.modules.moe import MoE, Routing, load_balance_loss, router_z_loss
from encdec.modules.norms import RMSNorm, build_norm
from encdec.modules.positions import (
    LearnedPositions,
    PaddedSinusoidalPositions,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositions,
    relative_position_bucket,
    sinusoidal_table,
)
from encdec.modules.running_batch import RunningBatch
from encdec.modules.vocab_projection import lm_head

__all__ = [
    "Attention",
    "AttentionInputs",
    "CrossAttentionCache",
    "DecodeState",
    "DecoderBlock",
    "Dropout",
    "EncoderBlock",
    "FeedForward",
    "LayerCache",
    "LayerState",
    "LearnedPositions",
    "MoE",
    "Routing",
    "Packing",
    "PaddedSinusoidalPositions",
    "RMSNorm",
    "RelativePositionBias",
    "RotaryEmbedding",
    "RunningBatch",
    "SelfAttentionCache",
    "SinusoidalPositions",
    "StateBag",
    "StaticKVCache",
    "additive_mask",
    "as_bool_mask",
    "build_norm",
    "causal_mask",
    "dropout",
    "lm_head",
    "load_balance_loss",
    "relative_position_bucket",
    "router_z_loss",
    "within_window",
    "sinusoidal_table",
]
