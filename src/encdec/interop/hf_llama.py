"""Hugging Face Llama, Qwen2 and Qwen3 checkpoints (model_types llama, qwen2, qwen3) <-> encdec's decoder-only family.

The three share one layout (Touvron et al. 2023): a token table, pre-norm blocks of grouped-query self-attention
whose queries and keys RoPE rotates (rotate-half, default frequencies) and a SwiGLU feed-forward, RMSNorm as
weight * x / rms(x), a final norm and a head of its own or tied to the token table. Qwen2 biases q, k and v
(attention_bias qkv); Qwen3 norms each head's queries and keys before RoPE (qk_norm) with a head_dim of its own;
Llama's attention_bias biases all four projections, with mlp_bias the feed-forward's too (bias). What encdec does
not read from these families is refused in one sentence: RoPE scaling (llama3, yarn, linear, ...), a sliding
window that is on (encdec reads Gemma's, hf_gemma), an activation other than silu, feed-forward biases without
attention ones. encdec reads one EOS id (a list's first); a config.json without one stops at its pad, else at
id 0. transformers itself is not needed.
"""

from collections.abc import Callable
from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_hf_weights
from encdec.interop.family import first_set
from encdec.interop.family import pattern_name as hf_name
from encdec.models import DecoderOnly, ModelConfig

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
# ModelConfig field -> the config.json key it is read from (refusals name it)
LLAMA_KEYS = {
    "d_model": "hidden_size",
    "d_ff": "intermediate_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "d_head": "head_dim",
    "n_encoder_layers": "num_hidden_layers",
    "norm_eps": "rms_norm_eps",
    "max_positions": "max_position_embeddings",
    "dropout": "attention_dropout",
    "pad_id": "pad_token_id",
    "eos_id": "eos_token_id",
    "decoder_start_id": "bos_token_id",  # the placeholder a prompt's last token takes (causal_lm_shared)
}

LAYER = r"blocks\.(\d+)\."
NAME_MAP = [
    (r"embed\.weight", "model.embed_tokens.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"final_norm\.weight", "model.norm.weight"),
    (LAYER + r"self_attn\.(q|k|v|o)\.(weight|bias)", r"model.layers.\1.self_attn.\2_proj.\3"),
    (LAYER + r"self_attn\.(q|k)_norm\.weight", r"model.layers.\1.self_attn.\2_norm.weight"),
    (LAYER + r"self_attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (LAYER + r"ffn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (LAYER + r"ffn\.wi_0\.(weight|bias)", r"model.layers.\1.mlp.gate_proj.\2"),
    (LAYER + r"ffn\.wi_1\.(weight|bias)", r"model.layers.\1.mlp.up_proj.\2"),
    (LAYER + r"ffn\.wo\.(weight|bias)", r"model.layers.\1.mlp.down_proj.\2"),
]


def llama_name(our_name: str) -> str:
    return hf_name(our_name, NAME_MAP, "Llama")


def rope_theta(hf: dict) -> float:
    """RoPE's base from rope_parameters (transformers 5) or rope_theta (earlier files); any scaling refused
    (Llama's, Qwen's, Gemma 2's)."""
    for key in ("rope_parameters", "rope_scaling"):  # rope_scaling: earlier files' scaling beside rope_theta
        kind = rope_kind(mapping(hf, key))
        if kind != "default":
            raise CheckpointError(f"config.json's {key} is RoPE of type {kind!r}, which encdec does not compute")
    return float(mapping(hf, "rope_parameters").get("rope_theta", hf.get("rope_theta", 10000.0)))


def rope_kind(rope: dict) -> str:
    """A RoPE mapping's type: rope_type (transformers 5), type (earlier files), else default."""
    return rope.get("rope_type", rope.get("type", "default"))


def mapping(hf: dict, key: str) -> dict:
    """config.json's `key` as a mapping ({} where it is absent or null)."""
    value = hf.get(key) or {}
    if not isinstance(value, dict):
        raise CheckpointError(f"config.json's {key} must be a mapping")
    return value


def check_no_window(hf: dict) -> None:
    """A sliding window is on where use_sliding_window is true and some layer slides (layer_types, else every
    layer from max_window_layers on, as Qwen2Config lays them out): refused, as encdec's window is Gemma's layout
    (one global layer every n, hf_gemma) and is not read from these families."""
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
    """The bias and attention_bias fields of a config.json's biases: Qwen2's on q, k and v, Llama's and Qwen3's
    attention_bias on all four projections, Llama's mlp_bias with them on every projection (bias)."""
    if model_type == "qwen2":
        return {"attention_bias": "qkv"}
    attention, mlp = hf.get("attention_bias", False), hf.get("mlp_bias", False)
    if mlp and not attention:
        raise CheckpointError(
            "config.json's mlp_bias is true and attention_bias false; encdec has no biases on the feed-forward alone"
        )
    return {"bias": True} if mlp else {"attention_bias": "qkvo" if attention else "none"}


def own_head_dim(hf: dict) -> int | None:
    """head_dim where it is not hidden_size / num_attention_heads (Qwen3's may differ), else None, ModelConfig's
    word for that width: a model's config reads back the same whichever of the two its file wrote."""
    head_dim, width, heads = hf.get("head_dim"), hf["hidden_size"], hf["num_attention_heads"]
    return None if isinstance(heads, int) and heads > 0 and head_dim == width / heads else head_dim


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
    eos = hf.get("eos_token_id")
    eos = (eos or [None])[0] if isinstance(eos, list) else eos  # the first; the list is a generation default
    eos_id = first_set(eos, hf.get("pad_token_id"), 0)
    return ModelConfig(
        family="decoder_only",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        d_ff=hf["intermediate_size"],
        n_heads=hf["num_attention_heads"],
        n_kv_heads=hf.get("num_key_value_heads"),
        d_head=own_head_dim(hf),
        n_encoder_layers=hf["num_hidden_layers"],
        activation="swiglu",
        norm="rmsnorm",
        norm_eps=hf["rms_norm_eps"],
        qk_norm=model_type == "qwen3",
        **attention_biases(hf, model_type),
        position="rope",
        rope_theta=rope_theta(hf),
        max_positions=hf["max_position_embeddings"],
        tie_embeddings=not untied_head,
        dropout=hf.get("attention_dropout", 0.0),
        pad_id=first_set(hf.get("pad_token_id"), eos_id),  # transformers' generate pads with EOS where none is set
        eos_id=eos_id,
        decoder_start_id=first_set(hf.get("bos_token_id"), eos_id),  # Qwen's documents start after an EOS
    )


def load_causal_lm(
    path: Path, hf_config: dict, config_from: Callable[..., ModelConfig], rename: Callable[[str], str]
) -> DecoderOnly:
    """A decoder-only directory whose token table is model.embed_tokens and head lm_head (Llama's, Qwen's,
    Gemma's), read by `config_from` and `rename`, its head untied where lm_head differs from the table (a tied
    checkpoint holds none)."""
    check_hf_model_fits(config_from(hf_config, untied_head=True), path)
    weights = read_hf_weights(path)
    head, table = weights.get("lm_head.weight"), weights.get("model.embed_tokens.weight")
    untied = head is not None and table is not None and not torch.equal(head, table)
    model = DecoderOnly(config_from(hf_config, untied))
    return fill_from_hf(model, weights, rename, path)


def load_hf_llama(path: Path, hf_config: dict) -> DecoderOnly:
    """A Llama, Qwen2 or Qwen3 directory."""
    return load_causal_lm(path, hf_config, config_from_llama, llama_name)


def layout_problems(cfg: ModelConfig) -> dict[str, bool]:
    """What keeps `cfg` from the layout Llama, Qwen2 and Qwen3 share, their biases and norms aside."""
    return {
        "family must be decoder_only": cfg.family != "decoder_only",
        "position must be rope": cfg.position != "rope",
        "norm must be rmsnorm, pre, without post_norms": cfg.norm != "rmsnorm"
        or cfg.norm_position != "pre"
        or cfg.post_norms,
        "activation must be swiglu": cfg.activation != "swiglu",
        "scale_attention must be true, without attention_scale_dim or attention_softcap": not cfg.scale_attention
        or cfg.attention_scale_dim is not None
        or cfg.attention_softcap is not None,
        "scale_embeddings, scale_output and embedding_norm must be false": cfg.scale_embeddings
        or cfg.scale_output
        or cfg.embedding_norm,
        "n_experts must be 1": cfg.n_experts != 1,
    }


def check_llama_compatible(cfg: ModelConfig, model_type: str) -> None:
    """Raise ConfigError naming every setting `model_type`'s layout does not have."""
    problems = layout_problems(cfg)
    if model_type == "qwen2":
        problems["attention_bias must be qkv (Qwen2 biases q, k and v)"] = cfg.attention_bias != "qkv"
    else:
        problems["attention_bias must be none or qkvo"] = cfg.attention_bias == "qkv"
    if model_type != "llama":
        problems["bias must be false"] = cfg.bias
    needs_norm = model_type == "qwen3"
    problems[f"qk_norm must be {str(needs_norm).lower()}"] = cfg.qk_norm != needs_norm
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        name = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3"}[model_type]
        raise Unmet(f"this model cannot be saved as Hugging Face {name}: " + "{unmet}", failed)


def llama_files(model: DecoderOnly, model_type: str) -> tuple[dict[str, torch.Tensor], dict]:
    """A model of `model_type`'s layout: its weights under transformers' names and its config.json keys."""
    cfg = model.config
    weights = {llama_name(name): t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    config = {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_encoder_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "max_position_embeddings": cfg.max_positions,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_dropout": cfg.dropout,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "bos_token_id": cfg.decoder_start_id,
    }
    if model_type == "llama":
        config |= {"attention_bias": cfg.bias or cfg.attention_bias == "qkvo", "mlp_bias": cfg.bias}
    if model_type == "qwen3":
        config |= {"attention_bias": cfg.attention_bias == "qkvo"}
    if model_type != "llama":
        config |= {"use_sliding_window": False, "sliding_window": None}
    return weights, config
