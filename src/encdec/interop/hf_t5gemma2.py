"""Hugging Face T5Gemma 2 checkpoints (model_type t5gemma2) <-> encdec's encoder-decoder, text alone.

T5Gemma 2 (Google, 2025) is an encoder-decoder adapted from Gemma 3. What it adds to T5Gemma (hf_t5gemma):
each head's queries and keys RMS-normed before RoPE (qk_norm); RoPE of another base in the sliding layers than
in the global ones, whose positions may be scaled linearly (rope_local_theta, rope_theta, rope_scale); the
encoder's sliding window split around each query, (w + 1) // 2 keys back and w // 2 ahead
(sliding_window_layout split); the decoder's self- and cross-attention merged into one attention, its queries
seeing their own keys and the encoder's (normed, unrotated, through the same projections) in one softmax
(merged_cross_attention); one token table for the encoder, the decoder and the head; and an end-of-image token
with a vector of its own (eoi_token_id). No score or logit caps unless config.json sets them.

Its encoder also holds a SigLIP vision tower whose image features replace the image tokens' embeddings: encdec
reads the text model alone (the tower's weights are left unread) and refuses an input holding the image token
in one sentence (image_token_id). An export writes the text model and a vision config of the smallest size:
transformers initialises that tower anew, which a text input never reaches. transformers itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_hf_weights
from encdec.interop.family import first_set
from encdec.interop.family import pattern_name as hf_name
from encdec.interop.hf_t5gemma import STACK_DEFAULTS, gemma_encoder_decoder, gemma_stack, global_every, section
from encdec.models import EncoderDecoder, ModelConfig

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
    **STACK_DEFAULTS,
    "vocab_size": 262208,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
}
T5GEMMA2_KEYS = {
    "d_model": "hidden_size",
    "d_ff": "intermediate_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "d_head": "head_dim",
    "n_encoder_layers": "num_hidden_layers",
    "norm_eps": "rms_norm_eps",
    "attention_scale_dim": "query_pre_attn_scalar",
    "attention_softcap": "attn_logit_softcapping",
    "logit_softcap": "final_logit_softcapping",
    "eoi_token_id": "eoi_token_index",
    "image_token_id": "image_token_index",
}
# ModelConfig field -> the config.json key its id is read from and transformers' default (Gemma 3's vocabulary's)
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

LAYER = r"(encoder|decoder)\.blocks\.(\d+)\."
NAME_MAP = [
    (r"((encoder|decoder)\.)?embed\.weight", "model.encoder.embed_tokens.weight"),  # one table, in three places
    (r"((encoder|decoder)\.)?eoi_embedding", "model.encoder.embed_tokens.eoi_embedding"),
    (r"lm_head\.weight", "lm_head.out_proj.weight"),
    (r"(encoder|decoder)\.final_norm\.weight", r"model.\1.norm.weight"),
    (LAYER + r"self_attn\.(q|k|v|o)\.weight", r"model.\1.layers.\2.self_attn.\3_proj.weight"),
    (LAYER + r"self_attn\.(q|k)_norm\.weight", r"model.\1.layers.\2.self_attn.\3_norm.weight"),
    (LAYER + r"self_attn_norm\.weight", r"model.\1.layers.\2.pre_self_attn_layernorm.weight"),
    (LAYER + r"self_attn_post_norm\.weight", r"model.\1.layers.\2.post_self_attn_layernorm.weight"),
    (LAYER + r"ffn_norm\.weight", r"model.\1.layers.\2.pre_feedforward_layernorm.weight"),
    (LAYER + r"ffn_post_norm\.weight", r"model.\1.layers.\2.post_feedforward_layernorm.weight"),
    (LAYER + r"ffn\.wi_0\.weight", r"model.\1.layers.\2.mlp.gate_proj.weight"),
    (LAYER + r"ffn\.wi_1\.weight", r"model.\1.layers.\2.mlp.up_proj.weight"),
    (LAYER + r"ffn\.wo\.weight", r"model.\1.layers.\2.mlp.down_proj.weight"),
]


def t5gemma2_name(our_name: str) -> str:
    return hf_name(our_name, NAME_MAP, "T5Gemma 2")


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
    full, sliding = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
    for kind, values in (("full_attention", full), ("sliding_attention", sliding)):
        allowed = ("default", "linear") if kind == "full_attention" else ("default",)
        if values.get("rope_type", "default") not in allowed:
            raise CheckpointError(
                f"config.json's {side} {kind} RoPE is of type {values['rope_type']!r}; encdec reads "
                f"{' and '.join(allowed)}"
            )
    scale = float(full.get("factor", 1.0)) if full.get("rope_type") == "linear" else 1.0
    return float(full.get("rope_theta", 1_000_000.0)), scale, float(sliding.get("rope_theta", 10_000.0))


def text_stacks(hf: dict) -> dict[str, dict]:
    """The encoder's text config and the decoder's, T5Gemma 2's defaults where they say nothing."""
    encoder = section(hf, "encoder", "the encoder's settings")
    stacks = {
        "encoder": section(encoder, "text_config", "the encoder's text model", within="encoder"),
        "decoder": section(hf, "decoder", "the decoder's settings"),
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
    eos = decoder["eos_token_id"]
    return ModelConfig(
        vocab_size=decoder["vocab_size"],
        d_model=decoder["hidden_size"],
        d_ff=decoder["intermediate_size"],
        n_heads=decoder["num_attention_heads"],
        n_kv_heads=decoder["num_key_value_heads"],
        d_head=decoder["head_dim"],
        n_encoder_layers=encoder["num_hidden_layers"],
        n_decoder_layers=decoder["num_hidden_layers"],
        activation="gated_gelu",
        norm="gemma_rmsnorm",
        norm_eps=decoder["rms_norm_eps"],
        post_norms=True,
        qk_norm=True,
        merged_cross_attention=True,
        scale_attention=True,
        attention_scale_dim=decoder["query_pre_attn_scalar"],
        attention_softcap=decoder["attn_logit_softcapping"],
        sliding_window=window,
        sliding_window_layout="split" if window else "each_side",
        global_every=global_every(stacks) if window else 2,
        position="rope",
        rope_theta=theta,
        rope_scale=scale,
        rope_local_theta=local_theta if window else None,
        rope_cross="none",
        scale_embeddings=True,
        scale_output=False,
        tie_embeddings=not untied_head,
        logit_softcap=decoder["final_logit_softcapping"],
        dropout=hf.get("dropout_rate", 0.0),
        pad_id=decoder["pad_token_id"],
        eos_id=eos if isinstance(eos, int) else eos[0],
        decoder_start_id=first_set(hf.get("decoder_start_token_id"), decoder["bos_token_id"]),  # as generate reads
        **special_ids(hf, decoder["vocab_size"]),
    )


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
    check_hf_model_fits(config_from_t5gemma2(hf_config, untied_head=True), path)
    weights = read_hf_weights(path)
    head, table = weights.get("lm_head.out_proj.weight"), weights.get("model.encoder.embed_tokens.weight")
    untied = head is not None and table is not None and not torch.equal(head, table)
    model = EncoderDecoder(config_from_t5gemma2(hf_config, untied))
    return fill_from_hf(model, weights, t5gemma2_name, path)


def check_t5gemma2_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming every setting T5Gemma 2's layout does not have."""
    problems = {
        "position must be rope with rope_cross none": cfg.position != "rope" or cfg.rope_cross != "none",
        "norm must be gemma_rmsnorm with post_norms": cfg.norm != "gemma_rmsnorm" or not cfg.post_norms,
        "norm_position must be pre": cfg.norm_position != "pre",
        "qk_norm and merged_cross_attention must be true": not cfg.qk_norm or not cfg.merged_cross_attention,
        "activation must be gated_gelu": cfg.activation != "gated_gelu",
        "bias must be false": cfg.bias,
        "scale_attention must be true": not cfg.scale_attention,
        "scale_embeddings must be true": not cfg.scale_embeddings,
        "scale_output must be false": cfg.scale_output,
        "shared_embeddings must be true": not cfg.shared_embeddings,
        "sliding_window_layout must be split": cfg.sliding_window is not None and cfg.sliding_window_layout != "split",
        "embedding_norm must be false": cfg.embedding_norm,
        "final_logits_bias must be false": cfg.final_logits_bias,
        "n_experts must be 1": cfg.n_experts != 1,
    }
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        raise Unmet("this model cannot be saved as Hugging Face T5Gemma 2: {unmet}", failed)


def t5gemma2_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A T5Gemma 2-layout model's text weights under transformers' names and its config.json keys."""
    cfg = model.config
    weights = {t5gemma2_name(name): t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    if cfg.eoi_token_id is None:  # transformers' embedding always has the vector; no token of this model reads it
        weights["model.encoder.embed_tokens.eoi_embedding"] = torch.zeros(cfg.d_model)
    full = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scale != 1.0:
        full = {"rope_type": "linear", "rope_theta": cfg.rope_theta, "factor": cfg.rope_scale}
    sliding = {"rope_type": "default", "rope_theta": cfg.rope_local_theta or cfg.rope_theta}

    def stack(layers: int) -> dict:
        rope = {"full_attention": full, "sliding_attention": sliding}
        return {**gemma_stack(cfg, layers), "rope_parameters": rope, "sliding_window": cfg.sliding_window or 4096}

    specials = {"eoi_token_index": cfg.eoi_token_id, "image_token_index": cfg.image_token_id}
    specials = {key: value for key, value in specials.items() if value is not None}
    encoder = {
        "text_config": stack(cfg.n_encoder_layers),
        "vision_config": PLACEHOLDER_VISION,
        "mm_tokens_per_image": 1,
    }
    config = {"encoder": {**encoder, **specials}, "decoder": stack(cfg.decoder_layers), **specials}
    return weights, config | gemma_encoder_decoder(cfg)
