"""Hugging Face T5Gemma checkpoints (model_type t5gemma) <-> encdec's encoder-decoder.

T5Gemma (Zhang et al. 2025) is an encoder-decoder adapted from Gemma 2: each stack is Gemma 2's, with
Gemma's RMSNorm (x * (1 + weight) in float32; norm gemma_rmsnorm) before and after every sublayer
(post_norms), grouped-query attention scaled by query_pre_attn_scalar^-0.5 (attention_scale_dim) with its
scores capped at attn_logit_softcapping (attention_softcap), RoPE in self-attention alone (cross_attention.rope none),
sliding-window self-attention in the layers layer_types names (sliding_window, one global layer every
global_every), gated GELU (tanh) feed-forwards, token embeddings times sqrt(hidden_size), a token table per
stack (embeddings.shared false), the head tied to the decoder's or its own, and the logits capped at the
decoder's final_logit_softcapping (output.softcap). config.json holds an `encoder` and a `decoder` config;
encdec reads stacks that agree on their attention settings, each of its own depth and of its own widths (the
encoder's hidden size, heads and feed-forward as ModelConfig's encoder widths (model.encoder): the unbalanced 9B-2B), and refuses
others in one sentence. Decoding starts at config.json's decoder_start_token_id where it
sets one, else at the decoder's bos_token_id, as transformers' generate does. transformers
itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.checkpoint_files import load_by_names
from encdec.interop.family import IDS, Family, NameMap
from encdec.interop.gemma.gemma_layout import (
    GEMMA_STACK_KEYS,
    STACK_DEFAULTS,
    STACK_NAMES,
    encoder_decoder_fields,
    encoder_decoder_problems,
    gemma_encoder_decoder,
    gemma_stack,
    global_every,
    section,
)
from encdec.interop.llama.llama_layout import rope_kind
from encdec.models import EncoderDecoder, ImageTokens, ModelConfig
from encdec.models.config_specs import overlaid

# the widths the encoder may have of its own (ModelConfig's encoder_*: the unbalanced 9B-2B)
ENCODER_OWN_KEYS = {
    "d_model": "hidden_size",
    "d_ff": "intermediate_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "d_head": "head_dim",
}
# what the two stacks must agree on, as encdec's one ModelConfig has it
SAME_IN_BOTH = (
    "vocab_size",
    "hidden_activation",
    "rms_norm_eps",
    "query_pre_attn_scalar",
    "sliding_window",
    "attn_logit_softcapping",
    "rope_theta",
)
T5GEMMA_KEYS = GEMMA_STACK_KEYS | IDS
NAMES = NameMap(
    "T5Gemma",
    (
        ("encoder.embed.weight", "model.encoder.embed_tokens.weight"),  # a token table per stack
        ("embed.weight", "model.decoder.embed_tokens.weight"),
        ("decoder.embed.weight", "model.decoder.embed_tokens.weight"),
        ("lm_head.weight", "lm_head.out_proj.weight"),
        *STACK_NAMES,
    ),
)


def stack_config(hf: dict, side: str) -> dict:
    """The `side` stack's config (encoder or decoder), T5GemmaModuleConfig's defaults where it says nothing and
    its RoPE base read from rope_parameters (transformers 5) or rope_theta (earlier files)."""
    values = section(hf, side, f"the {side}'s settings")
    stack = {**STACK_DEFAULTS, **values}
    rope = stack.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise CheckpointError(f"config.json's {side} rope_parameters must be a mapping")
    if rope_kind(rope) != "default":
        raise CheckpointError(f"config.json's {side} uses RoPE of type {rope_kind(rope)!r}; encdec reads default")
    stack["rope_theta"] = rope.get("rope_theta", stack.get("rope_theta", 10000.0))
    return stack


def t5gemma_config(hf: dict) -> ModelConfig:
    """A T5Gemma config.json's ModelConfig, no weight read (encdec size): the head tied to the decoder's table
    unless tie_word_embeddings says false."""
    return config_from_t5gemma(hf, untied_head=hf.get("tie_word_embeddings", True) is False)


def config_from_t5gemma(hf: dict, untied_head: bool) -> ModelConfig:
    encoder, decoder = stack_config(hf, "encoder"), stack_config(hf, "decoder")
    for key in SAME_IN_BOTH:
        if encoder[key] != decoder[key]:
            raise CheckpointError(
                f"config.json's encoder and decoder differ in {key} ({encoder[key]} and {decoder[key]}); encdec "
                "reads T5Gemma whose stacks differ only in depth and widths"
            )
    own = {ours: encoder[key] for ours, key in ENCODER_OWN_KEYS.items() if encoder[key] != decoder[key]}
    if decoder["hidden_activation"] not in ("gelu_pytorch_tanh", "gelu_new"):
        raise CheckpointError(f"unsupported T5Gemma hidden_activation {decoder['hidden_activation']!r}")
    if encoder["attention_bias"] or decoder["attention_bias"]:
        raise CheckpointError("config.json's attention_bias is true; encdec reads T5Gemma without attention biases")
    all_full = all(t == "full_attention" for s in (encoder, decoder) for t in (s["layer_types"] or ["sliding"]))
    window = None if all_full or decoder["sliding_window"] is None else decoder["sliding_window"]
    t5gemma = dict(
        attention={
            "sliding_window": window,
            "global_every": global_every({"encoder": encoder, "decoder": decoder}) if window else 2,
        },
        positions={"rope_theta": decoder["rope_theta"]},
        embeddings={"shared": False},  # a token table each stack
        encoder=own,
    )
    return ModelConfig.from_dict(overlaid(encoder_decoder_fields(hf, encoder, decoder, untied_head), t5gemma))


def load_hf_t5gemma(path: Path, hf_config: dict) -> EncoderDecoder:
    """A T5Gemma directory, its head untied where lm_head.out_proj differs from the decoder's token table."""
    head, table = "lm_head.out_proj.weight", "model.decoder.embed_tokens.weight"
    return load_by_names(path, hf_config, config_from_t5gemma, EncoderDecoder, NAMES.hf, head, table)


def check_t5gemma_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming every setting T5Gemma's layout does not have."""
    problems = {
        **encoder_decoder_problems(cfg),
        "embeddings.shared must be false": cfg.embeddings.shared,
        "cross-attention heads must be the self-attention's": cfg.cross_attention.n_heads not in (None, cfg.n_heads)
        or cfg.cross_attention.n_kv_heads not in (None, cfg.n_kv_heads),
        "qk_norm, cross_attention.merged, rope_local_theta, rope_scale and a split window are T5Gemma 2's": (
            cfg.attention.qk_norm
            or cfg.cross_attention.merged
            or cfg.positions.rope_local_theta is not None
            or cfg.positions.rope_scale != 1.0
            or cfg.attention.sliding_window_layout != "each_side"
        ),
        "image_tokens are T5Gemma 2's": cfg.image_tokens != ImageTokens(),
    }
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        raise Unmet("this model cannot be saved as Hugging Face T5Gemma: {unmet}", failed)


def t5gemma_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A T5Gemma-layout model's weights under transformers' names and its config.json keys (an encoder and a
    decoder config, each of its own depth and widths)."""
    cfg = model.config

    def stack(stack_cfg: ModelConfig, layers: int, decoder: bool) -> dict:
        rope = {"rope_type": "default", "rope_theta": cfg.positions.rope_theta}
        return {
            **gemma_stack(stack_cfg, layers),
            "rope_parameters": rope,
            "sliding_window": cfg.attention.sliding_window,
            "is_decoder": decoder,
        }

    encoder = stack(cfg.encoder_config(), cfg.n_encoder_layers, False)
    decoder = stack(cfg, cfg.decoder_layers, True) | {"cross_attention_hidden_size": cfg.encoder_width}
    config = {"encoder": encoder, "decoder": decoder}
    return NAMES.weights(model), config | gemma_encoder_decoder(cfg)


FAMILIES = (
    Family(
        "t5gemma",
        "T5GemmaForConditionalGeneration",
        load_hf_t5gemma,
        check_t5gemma_compatible,
        t5gemma_files,
        lambda cfg: (
            cfg.positions.kind == "rope" and cfg.norms.kind == "gemma_rmsnorm" and not cfg.cross_attention.merged
        ),
        T5GEMMA_KEYS,
        ("tokenizer.model",),  # Gemma's SentencePiece model beside its tokenizer.json
        t5gemma_config,
        names=lambda cfg: NAMES,
        encoder_widths=True,
        # ROT5's RoPE and Llama's adapted to an encoder-decoder have no Hugging Face class
        only_counterpart=lambda cfg: (
            "an encoder-decoder with RoPE has no Hugging Face counterpart but T5Gemma"
            if cfg.positions.kind == "rope"
            else None
        ),
    ),
)
