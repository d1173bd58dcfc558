"""Hugging Face T5Gemma 2 checkpoints (model_type t5gemma2) <-> encdec's encoder-decoder, text alone.

T5Gemma 2 (Google, 2025) is an encoder-decoder adapted from Gemma 3. What it adds to T5Gemma (interop/t5gemma):
each head's queries and keys RMS-normed before RoPE (qk_norm); RoPE of another base in the sliding layers than
in the global ones, whose positions may be scaled linearly (rope_local_theta, rope_theta, rope_scale); the
encoder's sliding window split around each query, (w + 1) // 2 keys back and w // 2 ahead
(sliding_window_layout split); the decoder's self- and cross-attention merged into one attention, its queries
seeing their own keys and the encoder's (normed, unrotated, through the same projections) in one softmax
(cross_attention.merged); one token table for the encoder, the decoder and the head; and an end-of-image token
with a vector of its own (eoi_token_id). No score or logit caps unless config.json sets them.

Its encoder also holds a SigLIP vision tower whose image features replace the image tokens' embeddings: encdec
reads the text model alone (the tower's weights are left unread) and refuses an input holding the image token
in one sentence (image_token_id). An export writes the text model and a vision config of the smallest size:
transformers initialises that tower anew, which a text input never reaches. transformers itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.checkpoint_files import load_by_names
from encdec.interop.family import IDS, Family, NameMap, shared_table
from encdec.interop.gemma import gemma_layout
from encdec.models import EncoderDecoder, ModelConfig
from encdec.models.config_specs import overlaid

# what the two stacks must agree on, as encdec's one ModelConfig has it
SAME_IN_BOTH = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_activation",
    "rms_norm_eps",
    "query_pre_attn_scalar",
    "sliding_window",
    "attn_logit_softcapping",
    "rope",
)
TEXT_DEFAULTS = {
    **gemma_layout.STACK_DEFAULTS,
    "vocab_size": 262208,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
}
T5GEMMA2_KEYS = (
    gemma_layout.GEMMA_STACK_KEYS
    | {"image_tokens.eoi_token_id": "eoi_token_index", "image_tokens.image_token_id": "image_token_index"}
    | IDS
)
# ModelConfig.image_tokens field -> the config.json key its id is read from and transformers' default (Gemma 3's vocabulary's)
SPECIAL_IDS = {"eoi_token_id": ("eoi_token_index", 256_000), "image_token_id": ("image_token_index", 256_001)}
# the smallest vision tower transformers builds, written by an export (its weights are never read: see above)
PLACEHOLDER_VISION = {
    "hidden_size": 16,
    "intermediate_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "image_size": 14,
    "patch_size": 14,
}

# T5Gemma's stacks (the decoder's merged attention under self_attn), one token table and its end-of-image vector
NAMES = NameMap(
    "T5Gemma 2",
    (
        *shared_table("model.encoder.embed_tokens.weight"),
        *(
            (ours, "model.encoder.embed_tokens.eoi_embedding")
            for ours in ("eoi_embedding", "encoder.eoi_embedding", "decoder.eoi_embedding")
        ),
        ("lm_head.weight", "lm_head.out_proj.weight"),
        *gemma_layout.STACK_NAMES,
    ),
)


def text_model(hf_name: str) -> str:
    """A checkpoint's tensor name -> its name in transformers' T5Gemma2ForConditionalGeneration as built, where peft
    adapts it: the encoder's text layers live under model.encoder.text_model (a checkpoint's file drops the
    text_model part, and transformers renames as it reads)."""
    return hf_name.replace("model.encoder.", "model.encoder.text_model.", 1)


def rope_of(stack: dict, side: str) -> tuple[float, float, float]:
    """(global base, global linear scale, sliding base) from a stack's rope_parameters; types other than default and
    linear are one sentence."""
    rope = stack.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise CheckpointError(f"config.json's {side} rope_parameters must be a mapping")
    full = {"rope_theta": 1_000_000.0, **(rope.get("full_attention") or {})}
    sliding = {"rope_theta": 10_000.0, **(rope.get("sliding_attention") or {})}
    return gemma_layout.two_bases(full, sliding, f"{side} ")


def text_stacks(hf: dict) -> dict[str, dict]:
    """The encoder's text config and the decoder's, T5Gemma 2's defaults where they say nothing."""
    encoder = gemma_layout.section(hf, "encoder", "the encoder's settings")
    stacks = {
        "encoder": gemma_layout.section(encoder, "text_config", "the encoder's text model", within="encoder"),
        "decoder": gemma_layout.section(hf, "decoder", "the decoder's settings"),
    }
    stacks = {side: {**TEXT_DEFAULTS, **values} for side, values in stacks.items()}
    for side, stack in stacks.items():
        stack["rope"] = rope_of(stack, side)
        if stack["layer_types"] is None:  # Gemma 3's pattern: five sliding layers, then a global one
            stack["layer_types"] = [
                "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(stack["num_hidden_layers"])
            ]
    return stacks


def t5gemma2_config(hf: dict) -> ModelConfig:
    """A T5Gemma 2 config.json's ModelConfig, no weight read (encdec size): the head tied unless
    tie_word_embeddings says false."""
    return config_from_t5gemma2(hf, untied_head=hf.get("tie_word_embeddings", True) is False)


def config_from_t5gemma2(hf: dict, untied_head: bool) -> ModelConfig:
    stacks = text_stacks(hf)
    encoder, decoder = stacks["encoder"], stacks["decoder"]
    for key in SAME_IN_BOTH:
        if encoder[key] != decoder[key]:
            raise CheckpointError(
                f"config.json's encoder and decoder differ in {key} ({encoder[key]} and {decoder[key]}); encdec "
                "reads T5Gemma 2 whose stacks differ only in depth"
            )
    if decoder["hidden_activation"] not in ("gelu_pytorch_tanh", "gelu_new"):
        raise CheckpointError(f"unsupported T5Gemma 2 hidden_activation {decoder['hidden_activation']!r}")
    if encoder["attention_bias"] or decoder["attention_bias"]:
        raise CheckpointError("config.json's attention_bias is true; encdec reads T5Gemma 2 without attention biases")
    all_full = all(t == "full_attention" for s in stacks.values() for t in s["layer_types"])
    window = None if all_full or decoder["sliding_window"] is None else decoder["sliding_window"]
    theta, scale, local_theta = decoder["rope"]
    t5gemma2 = dict(
        attention={
            "qk_norm": True,
            "sliding_window": window,
            "sliding_window_layout": "split" if window else "each_side",
            "global_every": gemma_layout.global_every(stacks) if window else 2,
        },
        positions={"rope_theta": theta, "rope_scale": scale, "rope_local_theta": local_theta if window else None},
        image_tokens=special_ids(hf, decoder["vocab_size"]),
    )
    stacks_fields = gemma_layout.encoder_decoder_fields(hf, encoder, decoder, untied_head, merged=True)
    return ModelConfig.from_dict(overlaid(stacks_fields, t5gemma2))


def special_ids(hf: dict, vocab_size) -> dict:
    """eoi_token_id and image_token_id as config.json gives them, unconverted: ModelConfig checks them as every
    token id (below vocab_size); null is no such token. Where it gives none, transformers' default (SPECIAL_IDS)
    where the vocabulary holds it, else none: no token of a smaller vocabulary is one. As transformers reads them,
    the encoder's end-of-image id wins over the top level's, the top level's image id over the encoder's."""
    encoder = hf.get("encoder") if isinstance(hf.get("encoder"), dict) else {}
    ids = {}
    for field, (key, default) in SPECIAL_IDS.items():
        sources = (encoder, hf) if key == "eoi_token_index" else (hf, encoder)
        given = next((source for source in sources if key in source), None)
        if given is not None:
            ids[field] = given[key]
        elif isinstance(vocab_size, int) and default < vocab_size:
            ids[field] = default
    return ids


def load_hf_t5gemma2(path: Path, hf_config: dict) -> EncoderDecoder:
    """A T5Gemma 2 directory's text model, its head untied where lm_head.out_proj differs from the token table."""
    head, table = "lm_head.out_proj.weight", "model.encoder.embed_tokens.weight"
    return load_by_names(path, hf_config, config_from_t5gemma2, EncoderDecoder, NAMES.hf, head, table)


def check_t5gemma2_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming every setting T5Gemma 2's layout does not have."""
    problems = {
        **gemma_layout.encoder_decoder_problems(cfg),
        "attention.qk_norm and cross_attention.merged must be true": not cfg.attention.qk_norm
        or not cfg.cross_attention.merged,
        "embeddings.shared must be true": not cfg.embeddings.shared,
        "attention.sliding_window_layout must be split": cfg.attention.sliding_window is not None
        and cfg.attention.sliding_window_layout != "split",
    }
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        raise Unmet("this model cannot be saved as Hugging Face T5Gemma 2: {unmet}", failed)


def t5gemma2_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A T5Gemma 2-layout model's text weights under transformers' names and its config.json keys."""
    cfg = model.config
    weights = NAMES.weights(model)
    if (
        cfg.image_tokens.eoi_token_id is None
    ):  # transformers' embedding always has the vector; no token of this model reads it
        weights["model.encoder.embed_tokens.eoi_embedding"] = torch.zeros(cfg.d_model)

    def stack(layers: int) -> dict:
        rope = gemma_layout.two_bases_written(cfg)
        return {
            **gemma_layout.gemma_stack(cfg, layers),
            "rope_parameters": rope,
            "sliding_window": cfg.attention.sliding_window or 4096,
        }

    specials = {"eoi_token_index": cfg.image_tokens.eoi_token_id, "image_token_index": cfg.image_tokens.image_token_id}
    specials = {key: value for key, value in specials.items() if value is not None}
    encoder = {
        "text_config": stack(cfg.n_encoder_layers),
        "vision_config": PLACEHOLDER_VISION,
        "mm_tokens_per_image": 1,
    }
    config = {"encoder": {**encoder, **specials}, "decoder": stack(cfg.decoder_layers), **specials}
    return weights, config | gemma_layout.gemma_encoder_decoder(cfg)


FAMILIES = (
    Family(
        "t5gemma2",
        "T5Gemma2ForConditionalGeneration",
        load_hf_t5gemma2,
        check_t5gemma2_compatible,
        t5gemma2_files,
        lambda cfg: cfg.cross_attention.merged,
        T5GEMMA2_KEYS,
        ("tokenizer.model",),
        t5gemma2_config,
        names=lambda cfg: NAMES,
        module_name=text_model,
    ),
)
