"""Hugging Face BlenderbotSmall (model_type blenderbot-small: BlenderbotSmallForConditionalGeneration) <-> encdec's
post-norm encoder-decoder with learned positions and the decoder's embedding norm before its positions.

BlenderbotSmall (Roller et al. 2021, the 90M model; ParlAI's "xlm" Transformer variant) is BART's weight layout
(interop/bart/bart_layout.py), post-norm, with learned positions looked up at p itself (position_offset 0, as
Blenderbot's) and a LayerNorm of the embeddings in each stack, placed differently: the encoder's normalises token
plus position embeddings (BART's layernorm_embedding), the decoder's its token embeddings before the positions are
added (model.embeddings.decoder_norm_first). Its defaults, as BlenderbotSmallConfig's: pad 0, BOS 1, EOS 2,
decoder start 1, 512 positions. Its tokenizer (BlenderbotSmallTokenizer) is a lower-casing BPE of vocab.json and
merges.txt, its specials __null__, __start__, __end__, __unk__.

The scale of the decoder's token embeddings: with scale_embedding true ParlAI and transformers 4 normalise
sqrt(d_model) * tokens, which encdec computes; transformers 5 leaves the decoder's unscaled, which a LayerNorm
undoes but for its epsilon (one part in d_model * var + eps). With scale_embedding false, its config's default,
both agree exactly.
"""

from pathlib import Path

import torch

from encdec.interop.bart import bart_layout
from encdec.interop.family import Family, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig

DEFAULTS = {
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
    "max_position_embeddings": 512,
}


def blenderbot_small_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    return bart_layout.layout_config(
        DEFAULTS | hf,
        untied_head,
        position="learned",
        position_offset=0,
        embedding_norm=True,
        embeddings={"decoder_norm_first": True},
    )


def load_hf_blenderbot_small(path: Path, hf_config: dict) -> EncoderDecoder:
    return bart_layout.load_layout(path, blenderbot_small_config_from_hf, hf_config)


def check_blenderbot_small_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings BlenderbotSmall's layout does not have."""
    embeddings = bart_layout.learned_from_zero_problems(cfg, embedding_norm=True)
    bart_layout.check_layout(cfg, "BlenderbotSmall", embeddings, decoder_norm_first=True)


def blenderbot_small_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A post-norm model with learned positions from 0 and the decoder's embedding norm first as BlenderbotSmall's
    weights (BART's names; each position table as it is, without the two rows BART's has before position 0) and
    config.json keys."""
    weights = bart_layout.layout_weights(model.state_dict(), model.config)
    tables = {f"model.{side}.embed_positions.weight" for side in ("encoder", "decoder")}
    weights |= {key: weights[key][2:].contiguous() for key in tables}
    return weights, bart_layout.layout_hf_config(model.config)


FAMILIES = (
    Family(
        "blenderbot-small",
        "BlenderbotSmallForConditionalGeneration",
        load_hf_blenderbot_small,
        check_blenderbot_small_compatible,
        blenderbot_small_files,
        lambda cfg: cfg.embeddings.decoder_norm_first,  # no other family places the decoder's norm so
        bart_layout.BART_KEYS,
        ("vocab.json", "merges.txt"),  # its lower-casing BPE (BlenderbotSmallTokenizer)
        config_read_alone(blenderbot_small_config_from_hf),
        names=bart_layout.names_for,
    ),
)
