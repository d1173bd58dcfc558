"""The decoder stack Llama's layout made common, which Llama, Qwen2, Qwen3, Gemma 2, Gemma 3 and each of T5Gemma's
stacks share: the config.json keys of its sizes, RoPE's base read from config.json, the names of a layer's
projections (q_proj ... o_proj, q_norm and k_norm, gate_proj, up_proj and down_proj), and a directory loaded by
its names. The families' folders add their norms, defaults and refusals.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from encdec.errors import CheckpointError
from encdec.interop.checkpoint_files import load_by_names
from encdec.interop.family import Family, NameMap, first_eos, first_set
from encdec.models import DecoderOnly, ModelConfig

# ModelConfig field -> the config.json key of a stack it is read from (refusals name it)
STACK_KEYS = {
    "d_model": "hidden_size",
    "d_ff": "intermediate_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "d_head": "head_dim",
    "n_encoder_layers": "num_hidden_layers",
    "norms.eps": "rms_norm_eps",
}
LLAMA_KEYS = STACK_KEYS | {
    "positions.max": "max_position_embeddings",
    "dropout": "attention_dropout",
    "pad_id": "pad_token_id",
    "eos_id": "eos_token_id",
    "decoder_start_id": "bos_token_id",  # the placeholder a prompt's last token takes (causal_lm_shared)
}


def layer_names(ours: str, theirs: str, attention: str = "self_attn") -> tuple[tuple[str, str], ...]:
    """A layer's projections under our prefix `ours` and the checkpoint's `theirs`: `attention`'s q, k, v and o
    (q_proj ... o_proj), its heads' query and key norms, and the gated feed-forward (gate, up, down)."""
    return (
        (f"{ours}{attention}.{{qkvo}}.{{wb}}", f"{theirs}{attention}.{{qkvo}}_proj.{{wb}}"),
        (f"{ours}{attention}.{{qk}}_norm.weight", f"{theirs}{attention}.{{qk}}_norm.weight"),
        (ours + "ffn.wi_0.{wb}", theirs + "mlp.gate_proj.{wb}"),
        (ours + "ffn.wi_1.{wb}", theirs + "mlp.up_proj.{wb}"),
        (ours + "ffn.wo.{wb}", theirs + "mlp.down_proj.{wb}"),
    )


def decoder_names(family: str, *norms: tuple[str, str]) -> NameMap:
    """A causal LM's names (model.embed_tokens, model.layers.{i}, model.norm, lm_head) with its layers' `norms`."""
    return NameMap(
        family,
        (
            ("embed.weight", "model.embed_tokens.weight"),
            ("lm_head.weight", "lm_head.weight"),
            ("final_norm.weight", "model.norm.weight"),
            *layer_names("blocks.{i}.", "model.layers.{i}."),
            *norm_names("blocks.{i}.", "model.layers.{i}.", norms),
        ),
    )


def norm_names(ours: str, theirs: str, norms: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A layer's `norms` (our norm, the checkpoint's) under our layer prefix `ours` and the checkpoint's `theirs`."""
    return tuple((f"{ours}{a}.weight", f"{theirs}{b}.weight") for a, b in norms)


def load_causal_lm(path: Path, hf_config: dict, config_from, names: NameMap) -> DecoderOnly:
    """A decoder-only directory whose token table is model.embed_tokens and head lm_head (Llama's, Qwen's,
    Gemma's), its head untied where lm_head differs from the table (a tied checkpoint holds none)."""
    return load_by_names(path, hf_config, config_from, DecoderOnly, names.hf)


def decoder_fields(hf: dict) -> dict:
    """The ModelConfig fields of a causal LM's config.json (its class's defaults filled in) that Llama's, Qwen's and
    Gemma's read alike: its sizes, and its ids, EOS a list's first (generate stops at any of a list; encdec at one),
    else pad, else 0; pad and the start EOS where unset, as transformers' generate pads and Qwen's documents start."""
    eos_id = first_set(first_eos(hf.get("eos_token_id")), hf.get("pad_token_id"), 0)
    return {
        "family": "decoder_only",
        "vocab_size": hf["vocab_size"],
        "d_model": hf["hidden_size"],
        "d_ff": hf["intermediate_size"],
        "n_heads": hf["num_attention_heads"],
        "n_kv_heads": hf.get("num_key_value_heads"),
        "d_head": own_head_dim(hf),
        "n_encoder_layers": hf["num_hidden_layers"],
        "norms": {"eps": hf["rms_norm_eps"]},
        "positions": {"max": hf["max_position_embeddings"]},
        "pad_id": first_set(hf.get("pad_token_id"), eos_id),
        "eos_id": eos_id,
        "decoder_start_id": first_set(hf.get("bos_token_id"), eos_id),
    }


def stack_sizes(cfg: ModelConfig, layers: int) -> dict:
    """The config.json keys of a stack of `layers` layers of `cfg`'s sizes, and the ids it carries."""
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.norms.eps,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "bos_token_id": cfg.decoder_start_id,
    }


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


def own_head_dim(hf: dict) -> int | None:
    """head_dim where it is not hidden_size / num_attention_heads (Qwen3's may differ), else None, ModelConfig's
    word for that width: a model's config reads back the same whichever of the two its file wrote."""
    head_dim, width, heads = hf.get("head_dim"), hf["hidden_size"], hf["num_attention_heads"]
    return None if isinstance(heads, int) and heads > 0 and head_dim == width / heads else head_dim


@dataclass(frozen=True)
class CausalLayout:
    """What the decoder-only families of one layout share (Llama's: Llama, Qwen2, Qwen3; Gemma's: Gemma 2, Gemma 3);
    `check` and `files` are told the model_type they are for."""

    load: Callable[[Path, dict], DecoderOnly]
    check: Callable[..., None]
    files: Callable[..., tuple[dict, dict]]
    keys: dict[str, str]
    config: Callable[[dict], ModelConfig]
    names: NameMap

    def family(self, model_type: str, hf_class: str, writes, tokenizer_files: tuple[str, ...]) -> Family:
        return Family(
            model_type,
            hf_class,
            self.load,
            partial(self.check, model_type=model_type),
            partial(self.files, model_type=model_type),
            writes,
            self.keys,
            tokenizer_files,
            self.config,
            model_family="decoder_only",
            names=lambda cfg: self.names,
        )
