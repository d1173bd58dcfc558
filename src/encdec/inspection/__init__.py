"""What a model attends to: the attention probabilities its own forward pass computes, as tensors and heat maps.

    record.py   record_attention(model, src_ids, tgt_ids): every decoder layer's cross-attention and every
                encoder layer's self-attention in one teacher-forced pass, recorded inside the model's
                Attention modules (encdec.modules.attention), so positions, masks and heads are the pass's own
    maps.py     attention_maps(MODEL, source, target=None): the same for a text and a model encdec opens, with
                the token strings; without a target, the model's greedy output is the target
    plot.py     plot_attention(maps, path): heat maps as a PNG (`encdec attention`)

It sits beside training/, above runs/ (it opens models as runs/ does), and imports nothing from training/.
"""

from encdec.inspection.maps import AttentionMaps, attention_maps, save_maps
from encdec.inspection.plot import plot_attention
from encdec.inspection.record import AttentionRecord, record_attention

__all__ = ["AttentionMaps", "AttentionRecord", "attention_maps", "plot_attention", "record_attention", "save_maps"]
