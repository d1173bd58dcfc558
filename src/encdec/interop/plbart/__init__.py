"""Hugging Face PLBart (model_type plbart: PLBartForConditionalGeneration) <-> encdec's post-norm encoder-decoder
with learned positions.

PLBart (Ahmad et al. 2021) is BART pre-trained on code and text: BART's layout and weight names
(interop/bart/bart_layout.py), its embeddings scaled by sqrt(d_model) (scale_embedding, true by default). Nothing
in the layout tells it from BART, so a PLBart is read with hf_model_type "plbart", which exports it back as
PLBartForConditionalGeneration. Its defaults, as PLBartConfig's: pad 1, EOS 2, BOS 0 (the decoder's start where
config.json names none). Its tokenizer (sentencepiece.bpe.model) places a language code after EOS, as mBART's
does (__python__, __java__, __en_XX__).
"""

from encdec.interop.bart import bart_layout
from encdec.models import ModelConfig


def plbart_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    hf = {"scale_embedding": True, "pad_token_id": 1, "eos_token_id": 2, "bos_token_id": 0, **hf}
    return bart_layout.layout_config(
        hf, untied_head, positions={"kind": "learned", "offset": 2}, embeddings={"norm": True}, hf_model_type="plbart"
    )


FAMILIES = (  # its tokenizer's SentencePiece model, its language codes added after the pieces
    bart_layout.named_family(
        "plbart", "PLBartForConditionalGeneration", "PLBart", plbart_config_from_hf, ("sentencepiece.bpe.model",)
    ),
)
