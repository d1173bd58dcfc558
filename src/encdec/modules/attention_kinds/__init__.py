"""Attention kinds: each a small declared component that owns its rule, composed per layer (one file per
group of kinds, as fairseq2 keeps one per attention variant).

A layer's attention is a tuple of kinds (`LayerKinds`): T5's encoder layer `(Full(), RelativeBias(t))`, LongT5's
`(Full(), Band(127), RelativeBias(t), TransientGlobal(16, g))`, a Gemma 2 sliding decoder layer
`(Causal(), Band(4096, causal=True), Rope(r))`, LED's `(Full(), Band(512), GlobalTokenKeys())`. What each declares (its rule, band, bias, rotation, extra keys and
parameters) is in kind.py; the dense masks, the chunked long-input path and FlexAttention's block masks read it.

`KINDS` is the table of every kind by name: a new variant is its file and one entry here. A config adds kinds to
every self-attention layer by these names (model.attention.kinds: {dilated_band: {width: 4, dilation: 2}}: `named`),
each built by its own `declared` from its settings.
"""

from encdec.modules.attention_kinds.alibi import Alibi
from encdec.modules.attention_kinds.dilated import DilatedBand
from encdec.modules.attention_kinds.extra_keys import Merged, TransientGlobal
from encdec.modules.attention_kinds.kind import (
    AttentionKind,
    LayerKinds,
    declared_kinds,
    find,
    layer_allows,
    layer_band,
    layer_bias,
    layer_in_blocks,
    layer_mask,
    layer_rule,
    mask_mod,
    score_mod,
)
from encdec.modules.attention_kinds.local_global import GlobalTokenKeys
from encdec.modules.attention_kinds.masked import Band, Causal, Full, only_causal
from encdec.modules.attention_kinds.positional import RelativeBias, Rope

KINDS: dict[str, type[AttentionKind]] = {
    "full": Full,
    "causal": Causal,
    "band": Band,
    "relative_bias": RelativeBias,
    "rope": Rope,
    "transient_global": TransientGlobal,
    "merged": Merged,
    "dilated_band": DilatedBand,
    "alibi": Alibi,
    "global_tokens": GlobalTokenKeys,
}


def named(kinds: dict[str, dict], heads: int, causal: bool) -> LayerKinds:
    """The kinds model.attention.kinds names, from this table."""
    return declared_kinds(kinds, heads, causal, KINDS)


__all__ = [
    "KINDS",
    "AttentionKind",
    "Band",
    "Causal",
    "Full",
    "GlobalTokenKeys",
    "LayerKinds",
    "Merged",
    "RelativeBias",
    "Rope",
    "TransientGlobal",
    "find",
    "named",
    "layer_allows",
    "layer_band",
    "layer_bias",
    "layer_in_blocks",
    "layer_mask",
    "layer_rule",
    "mask_mod",
    "only_causal",
    "score_mod",
]
