"""Hugging Face Llama, Qwen2 and Qwen3 checkpoints (model_types llama, qwen2, qwen3) <-> encdec's decoder-only family.

The three share one layout (Touvron et al. 2023): a token table, pre-norm blocks of grouped-query self-attention
whose queries and keys RoPE rotates (rotate-half, default frequencies) and a SwiGLU feed-forward, RMSNorm as
weight * x / rms(x), a final norm and a head of its own or tied to the token table. Qwen2 biases q, k and v
(attention_bias qkv); Qwen3 norms each head's queries and keys before RoPE (qk_norm) with a head_dim of its own;
Llama's attention_bias biases all four projections, with mlp_bias the feed-forward's too (bias). What encdec does
not read from these families is refused in one sentence: RoPE scaling (llama3, yarn, linear, ...), a sliding
window that is on (encdec reads Gemma's, interop/gemma), an activation other than silu, feed-forward biases without
attention ones. encdec reads one EOS id (a list's first); a config.json without one stops at its pad, else at
id 0. transformers itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.llama.llama_layout import (
    LLAMA_KEYS,
    CausalLayout,
    decoder_fields,
    decoder_names,
    load_causal_lm,
    rope_theta,
    stack_sizes,
)
from encdec.models import DecoderOnly, ModelConfig
from encdec.models.config_specs import overlaid

QWEN = {  # Qwen2Config's defaults for the sizes a config.json may leave out
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 32768,
}
DEFAULTS = {  # model_type -> its config class's defaults for every key encdec reads that a config.json may omit
    "llama": {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "qwen2": QWEN,
    "qwen3": {**QWEN, "head_dim": 128},
}
SHARED_DEFAULTS = {"rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False}
NAMES = decoder_names("Llama", ("self_attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"))
NAMES_OF = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3"}


def check_no_window(hf: dict) -> None:
    """A sliding window is on where use_sliding_window is true and some layer slides (layer_types, else every
    layer from max_window_layers on, as Qwen2Config lays them out): refused, as encdec's window is Gemma's layout
    (one global layer every n, interop/gemma) and is not read from these families."""
    window = hf.get("sliding_window") if hf.get("use_sliding_window", False) else None
    layers = hf["num_hidden_layers"]
    first_sliding = hf.get("max_window_layers", 28)
    types = hf.get("layer_types") or [
        "sliding_attention" if i >= first_sliding else "full_attention" for i in range(layers)
    ]
    if window is not None and "sliding_attention" in types:
        raise CheckpointError(
            f"config.json turns on a sliding window of {window} tokens (use_sliding_window), which encdec's "
            "decoder-only family reads from Gemma's checkpoints alone"
        )


def attention_biases(hf: dict, model_type: str) -> dict:
    """The bias and attention.bias fields of a config.json's biases: Qwen2's on q, k and v, Llama's and Qwen3's
    attention_bias on all four projections, Llama's mlp_bias with them on every projection (bias)."""
    if model_type == "qwen2":
        return {"attention": {"bias": "qkv"}}
    attention, mlp = hf.get("attention_bias", False), hf.get("mlp_bias", False)
    if mlp and not attention:
        raise CheckpointError(
            "config.json's mlp_bias is true and attention_bias false; encdec has no biases on the feed-forward alone"
        )
    return {"bias": True} if mlp else {"attention": {"bias": "qkvo" if attention else "none"}}


def config_from_llama(hf: dict, untied_head: bool | None = None) -> ModelConfig:
    """A Llama, Qwen2 or Qwen3 config.json's ModelConfig, its config class's defaults where it says nothing (or
    null); the head untied as `untied_head` says, None: as tie_word_embeddings says (encdec size, no weight read)."""
    model_type = hf["model_type"]
    hf = {**SHARED_DEFAULTS, **DEFAULTS[model_type], **{key: value for key, value in hf.items() if value is not None}}
    untied_head = not hf["tie_word_embeddings"] if untied_head is None else untied_head
    if hf["hidden_act"] != "silu":
        raise CheckpointError(
            f"config.json's hidden_act is {hf['hidden_act']!r}; encdec reads {model_type} with silu (SwiGLU) alone"
        )
    check_no_window(hf)
    llama = dict(
        activation="swiglu",
        norms={"kind": "rmsnorm"},
        attention={"qk_norm": model_type == "qwen3"},
        positions={"kind": "rope", "rope_theta": rope_theta(hf)},
        embeddings={"tie": not untied_head},
        dropout=hf.get("attention_dropout", 0.0),
    )
    return ModelConfig.from_dict(overlaid(overlaid(decoder_fields(hf), llama), attention_biases(hf, model_type)))


def load_hf_llama(path: Path, hf_config: dict) -> DecoderOnly:
    """A Llama, Qwen2 or Qwen3 directory."""
    return load_causal_lm(path, hf_config, config_from_llama, NAMES)


def layout_problems(cfg: ModelConfig) -> dict[str, bool]:
    """What keeps `cfg` from the layout Llama, Qwen2 and Qwen3 share, their biases and norms aside."""
    return {
        "family must be decoder_only": cfg.family != "decoder_only",
        "positions.kind must be rope": cfg.positions.kind != "rope",
        "norms.kind must be rmsnorm (pre, no post)": cfg.norms.kind != "rmsnorm"
        or cfg.norms.position != "pre"
        or cfg.norms.post,
        "activation must be swiglu": cfg.activation != "swiglu",
        "attention.scale must be true, without attention.scale_dim or attention.softcap": not cfg.attention.scale
        or cfg.attention.scale_dim is not None
        or cfg.attention.softcap is not None,
        "embeddings.scale, output.scale and embeddings.norm must be false": cfg.embeddings.scale
        or cfg.output.scale
        or cfg.embeddings.norm,
        "experts.count must be 1": cfg.experts.count != 1,
    }


def check_llama_compatible(cfg: ModelConfig, model_type: str) -> None:
    """Raise ConfigError naming every setting `model_type`'s layout does not have."""
    problems = layout_problems(cfg)
    if model_type == "qwen2":
        problems["attention.bias must be qkv (Qwen2 biases q, k and v)"] = cfg.attention.bias != "qkv"
    else:
        problems["attention.bias must be none or qkvo"] = cfg.attention.bias not in ("none", "qkvo")
    if model_type != "llama":
        problems["bias must be false"] = cfg.bias
    needs_norm = model_type == "qwen3"
    problems[f"attention.qk_norm must be {str(needs_norm).lower()}"] = cfg.attention.qk_norm != needs_norm
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        raise Unmet(f"this model cannot be saved as Hugging Face {NAMES_OF[model_type]}: " + "{unmet}", failed)


def llama_files(model: DecoderOnly, model_type: str) -> tuple[dict[str, torch.Tensor], dict]:
    """A model of `model_type`'s layout: its weights under transformers' names and its config.json keys."""
    cfg = model.config
    config = {
        **stack_sizes(cfg, cfg.n_encoder_layers),
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.positions.rope_theta},
        "max_position_embeddings": cfg.positions.max,
        "tie_word_embeddings": cfg.embeddings.tie,
        "attention_dropout": cfg.dropout,
    }
    if model_type == "llama":
        config |= {"attention_bias": cfg.bias or cfg.attention.bias == "qkvo", "mlp_bias": cfg.bias}
    if model_type == "qwen3":
        config |= {"attention_bias": cfg.attention.bias == "qkvo"}
    if model_type != "llama":
        config |= {"use_sliding_window": False, "sliding_window": None}
    return NAMES.weights(model), config


LAYOUT = CausalLayout(load_hf_llama, check_llama_compatible, llama_files, LLAMA_KEYS, config_from_llama, NAMES)
BPE = ("vocab.json", "merges.txt")  # Qwen's byte-level BPE beside its tokenizer.json
FAMILIES = (
    # Llama 2's SentencePiece model (Llama 3 ships tokenizer.json alone)
    LAYOUT.family(
        "llama",
        "LlamaForCausalLM",
        lambda cfg: not cfg.attention.qk_norm and cfg.attention.bias != "qkv",
        ("tokenizer.model",),
    ),
    LAYOUT.family("qwen2", "Qwen2ForCausalLM", lambda cfg: cfg.attention.bias == "qkv", BPE),
    LAYOUT.family("qwen3", "Qwen3ForCausalLM", lambda cfg: cfg.attention.qk_norm, BPE),
)
