"""The encoder's self-attention through FlexAttention (modules.flex_attention): each layer's FlexMask from the
batch's padding or packing, the layer's kinds and its extra keys (LongT5's transient-global blocks, Longformer's
global tokens), made from the very `SelfMasks` the dense and chunked paths read (models.encoder).

`flex_inputs` gives, per layer, its inputs where it takes FlexAttention (Stack.takes_flex: model.attention.
implementation) and None where it keeps the dense or chunked path; Encoder.attention_inputs takes them first.

Shapes: B batch, S source length.
"""

from encdec.modules import AttentionInputs
from encdec.modules.attention_kinds import GlobalTokenKeys, LayerKinds, TransientGlobal, find
from encdec.modules.flex_attention import EVERY_KEY, FlexBatch


def flex_inputs(encoder, masks) -> list[AttentionInputs | None]:
    """Each layer's FlexAttention inputs over the batch `masks` (models.encoder.SelfMasks), None where the
    layer takes the dense or chunked path; the layers of one kind share theirs (one block mask)."""
    if masks.packing is not None:  # a token sees its own example's
        segments = masks.packing.src_segments
        batch = FlexBatch(q_segments=segments, k_segments=segments)
    else:
        batch = FlexBatch(key_real=masks.src_mask) if masks.src_mask is not None else EVERY_KEY
    made = encoder.flex_masks(masks.x, batch, batch is not EVERY_KEY, extra=lambda kinds: extra_keys(kinds, masks))
    by_kind: dict[LayerKinds, AttentionInputs | None] = {}
    for i in range(len(encoder.blocks)):
        kinds = encoder.self_kinds(i)
        if kinds not in by_kind:
            flex = made(kinds)
            by_kind[kinds] = (
                None
                if flex is None
                else AttentionInputs(
                    q_pos=masks.pos, k_pos=masks.pos, global_keys=masks.globals, global_tokens=masks.tokens, flex=flex
                )
            )
    return [by_kind[encoder.self_kinds(i)] for i in range(len(encoder.blocks))]


def extra_keys(kinds: LayerKinds, masks):
    """The layer's keys after its own, as FlexAttention reads them: the transient-global blocks', the global
    tokens' (none where a row has none), or None."""
    transient = find(kinds, TransientGlobal)
    if transient is not None and masks.globals.count:
        return transient.flex_keys(masks.real, masks.globals)
    tokens = find(kinds, GlobalTokenKeys)
    if tokens is not None and masks.tokens.count:
        return tokens.flex_keys(masks.tokens)
    return None
