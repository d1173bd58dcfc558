"""Hugging Face T5Gemma checkpoints (model_type t5gemma) <-> encdec's encoder-decoder.

T5Gemma (Zhang et al. 2025) is an encoder-decoder adapted from Gemma 2: each stack is Gemma 2's, with
Gemma's RMSNorm (x * (1 + weight) in float32; norm gemma_rmsnorm) before and after every sublayer
(post_norms), grouped-query attention scaled by query_pre_attn_scalar^-0.5 (attention_scale_dim) with its
scores capped at attn_logit_softcapping (attention_softcap), RoPE in self-attention alone (rope_cross none),
sliding-window self-attention in the layers layer_types names (sliding_window, one global layer every
global_every), gated GELU (tanh) feed-forwards, token embeddings times sqrt(hidden_size), a token table per
stack (shared_embeddings false), the head tied to the decoder's or its own, and the logits capped at the
decoder's final_logit_softcapping (logit_softcap). config.json holds an `encoder` and a `decoder` config;
encdec reads stacks that agree on their attention settings, each of its own depth and of its own widths (the
encoder's hidden size, heads and feed-forward as ModelConfig's encoder_*: the unbalanced 9B-2B), and refuses
others in one sentence. Decoding starts at config.json's decoder_start_token_id where it
sets one, else at the decoder's bos_token_id, as transformers' generate does. transformers
itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_hf_weights
from encdec.interop.family import first_set
from encdec.interop.family import pattern_name as hf_name
from encdec.interop.hf_llama import rope_kind
from encdec.models import EncoderDecoder, ModelConfig
from encdec.schema import short

# T5GemmaModuleConfig's defaults (Gemma 2 2B's), for keys a stack's config leaves out
STACK_DEFAULTS = {
    "vocab_size": 256000,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-6,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
    "attention_bias": False,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "layer_types": None,
    "final_logit_softcapping": 30.0,
    "attn_logit_softcapping": 50.0,
}
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
# ModelConfig field -> the stack config key it is read from (refusals name it)
T5GEMMA_KEYS = {
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
}

STACK = r"(encoder|decoder)\.blocks\.(\d+)\."
NAME_MAP = [
    (r"encoder\.embed\.weight", "model.encoder.embed_tokens.weight"),
    (r"(decoder\.)?embed\.weight", "model.decoder.embed_tokens.weight"),
    (r"lm_head\.weight", "lm_head.out_proj.weight"),
    (r"(encoder|decoder)\.final_norm\.weight", r"model.\1.norm.weight"),
    (STACK + r"(self_attn|cross_attn)\.(q|k|v|o)\.weight", r"model.\1.layers.\2.\3.\4_proj.weight"),
    (STACK + r"(self_attn|cross_attn)_norm\.weight", r"model.\1.layers.\2.pre_\3_layernorm.weight"),
    (STACK + r"(self_attn|cross_attn)_post_norm\.weight", r"model.\1.layers.\2.post_\3_layernorm.weight"),
    (STACK + r"ffn_norm\.weight", r"model.\1.layers.\2.pre_feedforward_layernorm.weight"),
    (STACK + r"ffn_post_norm\.weight", r"model.\1.layers.\2.post_feedforward_layernorm.weight"),
    (STACK + r"ffn\.wi_0\.weight", r"model.\1.layers.\2.mlp.gate_proj.weight"),
    (STACK + r"ffn\.wi_1\.weight", r"model.\1.layers.\2.mlp.up_proj.weight"),
    (STACK + r"ffn\.wo\.weight", r"model.\1.layers.\2.mlp.down_proj.weight"),
]


def t5gemma_name(our_name: str) -> str:
    return hf_name(our_name, NAME_MAP, "T5Gemma")


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


def section(config: dict, key: str, what: str, within: str = "") -> dict:
    """The mapping config.json's `key` holds (`within` a section, if named), `what` it describes; a missing one is
    named as missing, not read as the defaults of another model's sizes."""
    where = f"config.json's {within} section" if within else "config.json"
    if key not in config or config[key] is None:
        raise CheckpointError(f"{where} has no {key} section ({what}), which encdec reads the model from")
    if not isinstance(config[key], dict):
        raise CheckpointError(f"{where}'s {key} must be a mapping of {what}, got {short(config[key], 40)}")
    return config[key]


def global_every(stacks: dict[str, dict]) -> int:
    """The step of global (full-attention) layers both stacks' layer_types follow: layer i global when
    (i + 1) % step == 0, the others sliding (their default: every other one, step 2)."""
    depths = {side: stack["num_hidden_layers"] for side, stack in stacks.items()}
    types = {side: stack["layer_types"] for side, stack in stacks.items()}
    for step in range(1, max(depths.values()) + 2):
        expected = {
            side: ["full_attention" if (i + 1) % step == 0 else "sliding_attention" for i in range(n)]
            for side, n in depths.items()
        }
        if all(types[side] is None and step == 2 or types[side] == expected[side] for side in stacks):
            return step
    raise CheckpointError(
        "config.json's layer_types are not one global layer every n with the others sliding, as encdec reads them"
    )


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
    own = {f"encoder_{ours}": encoder[key] for ours, key in ENCODER_OWN_KEYS.items() if encoder[key] != decoder[key]}
    if decoder["hidden_activation"] not in ("gelu_pytorch_tanh", "gelu_new"):
        raise CheckpointError(f"unsupported T5Gemma hidden_activation {decoder['hidden_activation']!r}")
    if encoder["attention_bias"] or decoder["attention_bias"]:
        raise CheckpointError("config.json's attention_bias is true; encdec reads T5Gemma without attention biases")
    all_full = all(t == "full_attention" for s in (encoder, decoder) for t in (s["layer_types"] or ["sliding"]))
    window = None if all_full or decoder["sliding_window"] is None else decoder["sliding_window"]
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
        scale_attention=True,
        attention_scale_dim=decoder["query_pre_attn_scalar"],
        attention_softcap=decoder["attn_logit_softcapping"],
        sliding_window=window,
        global_every=global_every({"encoder": encoder, "decoder": decoder}) if window else 2,
        position="rope",
        rope_theta=decoder["rope_theta"],
        rope_cross="none",
        scale_embeddings=True,
        scale_output=False,
        tie_embeddings=not untied_head,
        shared_embeddings=False,
        logit_softcap=decoder["final_logit_softcapping"],
        dropout=hf.get("dropout_rate", 0.0),
        pad_id=decoder["pad_token_id"],
        eos_id=eos if isinstance(eos, int) else eos[0],
        decoder_start_id=first_set(hf.get("decoder_start_token_id"), decoder["bos_token_id"]),  # as generate reads
        **own,
    )


def load_hf_t5gemma(path: Path, hf_config: dict) -> EncoderDecoder:
    """A T5Gemma directory, its head untied where lm_head.out_proj differs from the decoder's token table."""
    check_hf_model_fits(config_from_t5gemma(hf_config, untied_head=True), path)
    weights = read_hf_weights(path)
    head, table = weights.get("lm_head.out_proj.weight"), weights.get("model.decoder.embed_tokens.weight")
    untied = head is not None and table is not None and not torch.equal(head, table)
    model = EncoderDecoder(config_from_t5gemma(hf_config, untied))
    return fill_from_hf(model, weights, t5gemma_name, path)


def check_t5gemma_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming every setting T5Gemma's layout does not have."""
    problems = {
        "position must be rope with rope_cross none": cfg.position != "rope" or cfg.rope_cross != "none",
        "norm must be gemma_rmsnorm with post_norms": cfg.norm != "gemma_rmsnorm" or not cfg.post_norms,
        "norm_position must be pre": cfg.norm_position != "pre",
        "activation must be gated_gelu": cfg.activation != "gated_gelu",
        "bias must be false": cfg.bias,
        "scale_attention must be true": not cfg.scale_attention,
        "scale_embeddings must be true": not cfg.scale_embeddings,
        "scale_output must be false": cfg.scale_output,
        "shared_embeddings must be false": cfg.shared_embeddings,
        "cross-attention heads must be the self-attention's": cfg.cross_n_heads not in (None, cfg.n_heads)
        or cfg.cross_n_kv_heads not in (None, cfg.n_kv_heads),
        "embedding_norm must be false": cfg.embedding_norm,
        "final_logits_bias must be false": cfg.final_logits_bias,
        "n_experts must be 1": cfg.n_experts != 1,
        "qk_norm, merged_cross_attention, rope_local_theta, rope_scale and a split window are T5Gemma 2's": (
            cfg.qk_norm
            or cfg.merged_cross_attention
            or cfg.rope_local_theta is not None
            or cfg.rope_scale != 1.0
            or cfg.sliding_window_layout != "each_side"
        ),
        "eoi_token_id and image_token_id are T5Gemma 2's": cfg.eoi_token_id is not None
        or cfg.image_token_id is not None,
    }
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        raise Unmet("this model cannot be saved as Hugging Face T5Gemma: {unmet}", failed)


def gemma_stack(cfg: ModelConfig, layers: int) -> dict:
    """The config.json keys of one stack of `layers` layers that T5Gemma and T5Gemma 2 write alike (their RoPE
    and window keys differ)."""
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": cfg.norm_eps,
        "query_pre_attn_scalar": cfg.attention_scale_dim or cfg.head_dim,
        "attn_logit_softcapping": cfg.attention_softcap,
        "final_logit_softcapping": cfg.logit_softcap,
        "layer_types": ["sliding_attention" if cfg.sliding_layer(i) else "full_attention" for i in range(layers)],
        "attention_bias": False,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "bos_token_id": cfg.decoder_start_id,
    }


def gemma_encoder_decoder(cfg: ModelConfig) -> dict:
    """The config.json keys beside the stacks that T5Gemma and T5Gemma 2 write alike."""
    return {
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.tie_embeddings,
        "dropout_rate": cfg.dropout,
        "attention_dropout": cfg.dropout,
        "is_encoder_decoder": True,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "bos_token_id": cfg.decoder_start_id,
        "decoder_start_token_id": cfg.decoder_start_id,
    }


def t5gemma_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A T5Gemma-layout model's weights under transformers' names and its config.json keys (an encoder and a
    decoder config, each of its own depth and widths)."""
    cfg = model.config
    weights = {t5gemma_name(name): t.detach().cpu().contiguous() for name, t in model.state_dict().items()}

    def stack(stack_cfg: ModelConfig, layers: int, decoder: bool) -> dict:
        rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
        return {
            **gemma_stack(stack_cfg, layers),
            "rope_parameters": rope,
            "sliding_window": cfg.sliding_window,
            "is_decoder": decoder,
        }

    encoder = stack(cfg.encoder_config(), cfg.n_encoder_layers, False)
    decoder = stack(cfg, cfg.decoder_layers, True) | {"cross_attention_hidden_size": cfg.encoder_width}
    config = {"encoder": encoder, "decoder": decoder}
    return weights, config | gemma_encoder_decoder(cfg)
