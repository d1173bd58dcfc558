"""Hugging Face Gemma 2 and Gemma 3 text checkpoints (model_types gemma2, gemma3_text) <-> encdec's decoder-only
family.

Gemma 2 (Gemma Team 2024) is the stack T5Gemma takes for each of its own (hf_t5gemma), here alone and causal:
Gemma's RMSNorm (x * (1 + weight) in float32; norm gemma_rmsnorm) before and after every sublayer (post_norms),
grouped-query attention scaled by query_pre_attn_scalar^-0.5 (attention_scale_dim) with its scores capped at
attn_logit_softcapping (attention_softcap), sliding-window attention in the layers layer_types names (a query
sees the keys q - k < sliding_window, every key in one global layer every global_every), gated GELU (tanh)
feed-forwards, token embeddings times sqrt(hidden_size) rounded to the model's dtype, the head tied to the token
table or its own, and the logits capped at final_logit_softcapping (logit_softcap). Gemma 3 (Gemma Team 2025)
adds RMS norms of each head's queries and keys before RoPE (qk_norm), RoPE of its own base in the sliding layers
(rope_local_theta) beside the global layers' base, which linear scaling may stretch (rope_scale), five sliding
layers to a global one by default, and no caps unless config.json sets final_logit_softcapping: transformers'
Gemma 3 caps no attention scores whatever attn_logit_softcapping says, and neither does encdec.

Both read config.json as transformers 5 writes it (rope_parameters, layer_types) and as the released checkpoints
have it (rope_theta, Gemma 3's rope_local_base_freq, rope_scaling and sliding_window_pattern). What encdec does
not compute is refused in one sentence: attention biases, bidirectional attention, RoPE types other than default
(and linear on Gemma 3's global layers), layer_types that are not one global layer every n, an activation other
than GELU (tanh). encdec reads one EOS id (a list's first). transformers itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.family import first_set
from encdec.interop.family import pattern_name as hf_name
from encdec.interop.hf_llama import LLAMA_KEYS, load_causal_lm, mapping, own_head_dim, rope_kind, rope_theta
from encdec.interop.hf_t5gemma import STACK_DEFAULTS, global_every
from encdec.models import DecoderOnly, ModelConfig

DEFAULTS = {  # model_type -> its config class's defaults for every key encdec reads that a config.json may omit
    "gemma2": {  # Gemma2Config's, Gemma 2 2B's: T5Gemma's stacks' too
        **STACK_DEFAULTS,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
        "attention_dropout": 0.0,
    },
    "gemma3_text": {  # Gemma3TextConfig's
        **STACK_DEFAULTS,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
        "attention_dropout": 0.0,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "sliding_window_pattern": 6,  # released files' one global layer in six, where layer_types is absent
    },
}
NAMES = {"gemma2": "Gemma 2", "gemma3_text": "Gemma 3"}
# ModelConfig field -> the config.json key it is read from (refusals name it)
GEMMA_KEYS = LLAMA_KEYS | {
    "attention_scale_dim": "query_pre_attn_scalar",
    "attention_softcap": "attn_logit_softcapping",
    "logit_softcap": "final_logit_softcapping",
    "rope_theta": "rope_parameters",
    "rope_local_theta": "rope_parameters",
    "rope_scale": "rope_parameters",
}

LAYER = r"blocks\.(\d+)\."
NAME_MAP = [
    (r"embed\.weight", "model.embed_tokens.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"final_norm\.weight", "model.norm.weight"),
    (LAYER + r"self_attn\.(q|k|v|o)\.weight", r"model.layers.\1.self_attn.\2_proj.weight"),
    (LAYER + r"self_attn\.(q|k)_norm\.weight", r"model.layers.\1.self_attn.\2_norm.weight"),
    (LAYER + r"self_attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (LAYER + r"self_attn_post_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (LAYER + r"ffn_norm\.weight", r"model.layers.\1.pre_feedforward_layernorm.weight"),
    (LAYER + r"ffn_post_norm\.weight", r"model.layers.\1.post_feedforward_layernorm.weight"),
    (LAYER + r"ffn\.wi_0\.weight", r"model.layers.\1.mlp.gate_proj.weight"),
    (LAYER + r"ffn\.wi_1\.weight", r"model.layers.\1.mlp.up_proj.weight"),
    (LAYER + r"ffn\.wo\.weight", r"model.layers.\1.mlp.down_proj.weight"),
]


def gemma_name(our_name: str) -> str:
    return hf_name(our_name, NAME_MAP, "Gemma")


def gemma3_rope(hf: dict) -> tuple[float, float, float]:
    """Gemma 3's (global base, global linear scale, sliding base), from rope_parameters by layer type
    (transformers 5) or rope_theta, rope_scaling and rope_local_base_freq (released files), as Gemma3TextConfig
    reads them; a type other than default (and linear on the global layers) is one sentence."""
    rope = mapping(hf, "rope_parameters")
    full, sliding = dict(mapping(rope, "full_attention")), dict(mapping(rope, "sliding_attention"))
    full |= mapping(hf, "rope_scaling")  # a released file's scaling is the global layers'
    full.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
    sliding.setdefault("rope_theta", hf.get("rope_local_base_freq", 10_000.0))
    for kind, values, allowed in (
        ("full_attention", full, ("default", "linear")),
        ("sliding_attention", sliding, ("default",)),
    ):
        if rope_kind(values) not in allowed:
            raise CheckpointError(
                f"config.json's {kind} RoPE is of type {rope_kind(values)!r}; "
                f"encdec reads {' and '.join(allowed)} there"
            )
    scale = float(full["factor"]) if rope_kind(full) == "linear" else 1.0
    return float(full["rope_theta"]), scale, float(sliding["rope_theta"])


def layer_types(hf: dict, model_type: str) -> list[str]:
    """Each layer's attention: layer_types, else Gemma 2's every other one sliding, Gemma 3's sliding_window_pattern
    - 1 sliding layers to a global one."""
    if hf.get("layer_types") is not None:
        return hf["layer_types"]
    step = 2 if model_type == "gemma2" else hf["sliding_window_pattern"]
    return ["full_attention" if (i + 1) % step == 0 else "sliding_attention" for i in range(hf["num_hidden_layers"])]


def check_gemma_layout(hf: dict, model_type: str) -> None:
    """What Gemma 2 and Gemma 3 may set that encdec does not compute, each refused in one sentence."""
    name = NAMES[model_type]
    if hf["hidden_activation"] not in ("gelu_pytorch_tanh", "gelu_new"):
        raise CheckpointError(
            f"config.json's hidden_activation is {hf['hidden_activation']!r}; encdec reads {name} with GELU (tanh)"
        )
    if hf["attention_bias"]:
        raise CheckpointError(f"config.json's attention_bias is true; encdec reads {name} without attention biases")
    if hf.get("use_bidirectional_attention"):
        raise CheckpointError(
            f"config.json's use_bidirectional_attention is true; encdec reads {name} as a causal language model"
        )


def config_from_gemma(hf: dict, untied_head: bool | None = None) -> ModelConfig:
    """A Gemma 2 or Gemma 3 text config.json's ModelConfig, its config class's defaults where it says nothing (a
    null cap is no cap); the head untied as `untied_head` says, None: as tie_word_embeddings says (encdec size)."""
    model_type = hf["model_type"]
    hf = {**DEFAULTS[model_type], **hf}
    untied_head = hf["tie_word_embeddings"] is False if untied_head is None else untied_head
    check_gemma_layout(hf, model_type)
    types = layer_types(hf, model_type)
    window = hf["sliding_window"] if "sliding_attention" in types else None
    step = global_every({"model": {"num_hidden_layers": hf["num_hidden_layers"], "layer_types": types}})
    gemma3 = model_type == "gemma3_text"
    theta, scale, local_theta = gemma3_rope(hf) if gemma3 else (rope_theta(hf), 1.0, None)
    eos = hf["eos_token_id"]
    eos = (eos or [None])[0] if isinstance(eos, list) else eos  # generate stops at any of a list; encdec at one
    eos_id = first_set(eos, hf["pad_token_id"], 0)
    return ModelConfig(
        family="decoder_only",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        d_ff=hf["intermediate_size"],
        n_heads=hf["num_attention_heads"],
        n_kv_heads=hf["num_key_value_heads"],
        d_head=own_head_dim(hf),
        n_encoder_layers=hf["num_hidden_layers"],
        activation="gated_gelu",
        norm="gemma_rmsnorm",
        norm_eps=hf["rms_norm_eps"],
        post_norms=True,
        qk_norm=gemma3,
        scale_attention=True,
        attention_scale_dim=hf["query_pre_attn_scalar"],
        attention_softcap=None if gemma3 else hf["attn_logit_softcapping"],  # transformers' Gemma 3 caps none
        sliding_window=window,
        global_every=step if window else 2,
        position="rope",
        rope_theta=theta,
        rope_scale=scale,
        rope_local_theta=local_theta if window else None,
        max_positions=hf["max_position_embeddings"],
        scale_embeddings=True,
        scale_output=False,
        tie_embeddings=not untied_head,
        logit_softcap=hf["final_logit_softcapping"],
        dropout=hf["attention_dropout"],
        pad_id=first_set(hf["pad_token_id"], eos_id),
        eos_id=eos_id,
        decoder_start_id=first_set(hf["bos_token_id"], eos_id),
    )


def load_hf_gemma(path: Path, hf_config: dict) -> DecoderOnly:
    """A Gemma 2 or Gemma 3 text directory."""
    return load_causal_lm(path, hf_config, config_from_gemma, gemma_name)


def check_gemma_compatible(cfg: ModelConfig, model_type: str) -> None:
    """Raise ConfigError naming every setting `model_type`'s layout (gemma2, gemma3_text) does not have."""
    gemma3 = model_type == "gemma3_text"
    problems = {
        "family must be decoder_only": cfg.family != "decoder_only",
        "position must be rope": cfg.position != "rope",
        "norm must be gemma_rmsnorm with norm_position pre and post_norms": cfg.norm != "gemma_rmsnorm"
        or cfg.norm_position != "pre"
        or not cfg.post_norms,
        "activation must be gated_gelu": cfg.activation != "gated_gelu",
        "bias must be false and attention_bias none": cfg.bias or cfg.attention_bias != "none",
        "scale_attention must be true": not cfg.scale_attention,
        "scale_embeddings must be true, scale_output and embedding_norm false": not cfg.scale_embeddings
        or cfg.scale_output
        or cfg.embedding_norm,
        "n_experts must be 1": cfg.n_experts != 1,
        f"qk_norm must be {str(gemma3).lower()}": cfg.qk_norm != gemma3,
    }
    if gemma3:
        problems["attention_softcap must be unset (transformers' Gemma 3 caps no scores)"] = (
            cfg.attention_softcap is not None
        )
        problems["rope_local_theta must be set where rope_scale scales the global layers beside sliding ones"] = (
            cfg.sliding_window is not None and cfg.rope_scale != 1.0 and cfg.rope_local_theta is None
        )
    else:
        problems["rope_local_theta and rope_scale are Gemma 3's"] = cfg.rope_local_theta is not None or (
            cfg.rope_scale != 1.0
        )
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        raise Unmet(f"this model cannot be saved as Hugging Face {NAMES[model_type]}: " + "{unmet}", failed)


def gemma_rope(cfg: ModelConfig, model_type: str) -> dict:
    """rope_parameters as transformers 5 writes them: one set (Gemma 2), or the global and sliding layers' (Gemma 3)."""
    full = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if model_type == "gemma2":
        return full
    if cfg.rope_scale != 1.0:
        full = {"rope_type": "linear", "rope_theta": cfg.rope_theta, "factor": cfg.rope_scale}
    sliding = {"rope_type": "default", "rope_theta": cfg.rope_local_theta or cfg.rope_theta}
    return {"full_attention": full, "sliding_attention": sliding}


def gemma_files(model: DecoderOnly, model_type: str) -> tuple[dict[str, torch.Tensor], dict]:
    """A model of `model_type`'s layout: its weights under transformers' names and its config.json keys."""
    cfg = model.config
    weights = {gemma_name(name): t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    layers = cfg.n_encoder_layers
    config = {
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
        "sliding_window": cfg.sliding_window or 4096,  # no layer slides without one (layer_types)
        "layer_types": ["sliding_attention" if cfg.sliding_layer(i) else "full_attention" for i in range(layers)],
        "rope_parameters": gemma_rope(cfg, model_type),
        "max_position_embeddings": cfg.max_positions,
        "attention_bias": False,
        "use_bidirectional_attention": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_dropout": cfg.dropout,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "bos_token_id": cfg.decoder_start_id,
    }
    return weights, config
