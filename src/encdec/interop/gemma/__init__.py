"""Hugging Face Gemma 2 and Gemma 3 text checkpoints (model_types gemma2, gemma3_text) <-> encdec's decoder-only
family.

Gemma 2 (Gemma Team 2024) is the stack T5Gemma takes for each of its own (interop/t5gemma), here alone and causal:
Gemma's RMSNorm (x * (1 + weight) in float32; norm gemma_rmsnorm) before and after every sublayer (post_norms),
grouped-query attention scaled by query_pre_attn_scalar^-0.5 (attention_scale_dim) with its scores capped at
attn_logit_softcapping (attention_softcap), sliding-window attention in the layers layer_types names (a query
sees the keys q - k < sliding_window, every key in one global layer every global_every), gated GELU (tanh)
feed-forwards, token embeddings times sqrt(hidden_size) rounded to the model's dtype, the head tied to the token
table or its own, and the logits capped at final_logit_softcapping (output.softcap). Gemma 3 (Gemma Team 2025)
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
from encdec.interop.gemma.gemma_layout import (
    FEED_FORWARD_NORMS,
    STACK_DEFAULTS,
    gemma_fields,
    gemma_stack,
    global_every,
    two_bases,
    two_bases_written,
)
from encdec.interop.llama.llama_layout import (
    LLAMA_KEYS,
    CausalLayout,
    decoder_fields,
    decoder_names,
    load_causal_lm,
    mapping,
    rope_theta,
)
from encdec.models import DecoderOnly, ModelConfig
from encdec.models.config_specs import overlaid

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
TITLES = {"gemma2": "Gemma 2", "gemma3_text": "Gemma 3"}
# ModelConfig field -> the config.json key it is read from (refusals name it)
GEMMA_KEYS = LLAMA_KEYS | {
    "attention.scale_dim": "query_pre_attn_scalar",
    "attention.softcap": "attn_logit_softcapping",
    "output.softcap": "final_logit_softcapping",
    "positions.rope_theta": "rope_parameters",
    "positions.rope_local_theta": "rope_parameters",
    "positions.rope_scale": "rope_parameters",
}
NAMES = decoder_names(
    "Gemma",
    ("self_attn_norm", "input_layernorm"),
    ("self_attn_post_norm", "post_attention_layernorm"),
    *FEED_FORWARD_NORMS,
)


def gemma3_rope(hf: dict) -> tuple[float, float, float]:
    """Gemma 3's (global base, global linear scale, sliding base), from rope_parameters by layer type
    (transformers 5) or rope_theta, rope_scaling and rope_local_base_freq (released files), as Gemma3TextConfig
    reads them; a type other than default (and linear on the global layers) is one sentence."""
    rope = mapping(hf, "rope_parameters")
    full, sliding = dict(mapping(rope, "full_attention")), dict(mapping(rope, "sliding_attention"))
    full |= mapping(hf, "rope_scaling")  # a released file's scaling is the global layers'
    full.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
    sliding.setdefault("rope_theta", hf.get("rope_local_base_freq", 10_000.0))
    return two_bases(full, sliding)


def layer_types(hf: dict, model_type: str) -> list[str]:
    """Each layer's attention: layer_types, else Gemma 2's every other one sliding, Gemma 3's sliding_window_pattern
    - 1 sliding layers to a global one."""
    if hf.get("layer_types") is not None:
        return hf["layer_types"]
    step = 2 if model_type == "gemma2" else hf["sliding_window_pattern"]
    return ["full_attention" if (i + 1) % step == 0 else "sliding_attention" for i in range(hf["num_hidden_layers"])]


def check_gemma_layout(hf: dict, model_type: str) -> None:
    """What Gemma 2 and Gemma 3 may set that encdec does not compute, each refused in one sentence."""
    name = TITLES[model_type]
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
    gemma = dict(
        attention={
            "qk_norm": gemma3,
            "softcap": None if gemma3 else hf["attn_logit_softcapping"],  # transformers' Gemma 3 caps none
            "sliding_window": window,
            "global_every": step if window else 2,
        },
        positions={"rope_theta": theta, "rope_scale": scale, "rope_local_theta": local_theta if window else None},
        dropout=hf["attention_dropout"],
    )
    return ModelConfig.from_dict(overlaid(overlaid(decoder_fields(hf), gemma_fields(hf, untied_head)), gemma))


def load_hf_gemma(path: Path, hf_config: dict) -> DecoderOnly:
    """A Gemma 2 or Gemma 3 text directory."""
    return load_causal_lm(path, hf_config, config_from_gemma, NAMES)


def check_gemma_compatible(cfg: ModelConfig, model_type: str) -> None:
    """Raise ConfigError naming every setting `model_type`'s layout (gemma2, gemma3_text) does not have."""
    gemma3 = model_type == "gemma3_text"
    problems = {
        "family must be decoder_only": cfg.family != "decoder_only",
        "positions.kind must be rope": cfg.positions.kind != "rope",
        "norms.kind must be gemma_rmsnorm with norms.position pre and norms.post": cfg.norms.kind != "gemma_rmsnorm"
        or cfg.norms.position != "pre"
        or not cfg.norms.post,
        "activation must be gated_gelu": cfg.activation != "gated_gelu",
        "bias must be false and attention.bias none": cfg.bias or cfg.attention.bias != "none",
        "attention.scale must be true": not cfg.attention.scale,
        "embeddings.scale must be true, output.scale and embeddings.norm false": not cfg.embeddings.scale
        or cfg.output.scale
        or cfg.embeddings.norm,
        "experts.count must be 1": cfg.experts.count != 1,
        f"attention.qk_norm must be {str(gemma3).lower()}": cfg.attention.qk_norm != gemma3,
    }
    if gemma3:
        problems["attention.softcap must be unset (transformers' Gemma 3 caps no scores)"] = (
            cfg.attention.softcap is not None
        )
        problems["rope_local_theta must be set where rope_scale scales the global layers beside sliding ones"] = (
            cfg.attention.sliding_window is not None
            and cfg.positions.rope_scale != 1.0
            and cfg.positions.rope_local_theta is None
        )
    else:
        problems["rope_local_theta and rope_scale are Gemma 3's"] = cfg.positions.rope_local_theta is not None or (
            cfg.positions.rope_scale != 1.0
        )
    failed = [text for text, bad in problems.items() if bad]
    if failed:
        raise Unmet(f"this model cannot be saved as Hugging Face {TITLES[model_type]}: " + "{unmet}", failed)


def gemma_files(model: DecoderOnly, model_type: str) -> tuple[dict[str, torch.Tensor], dict]:
    """A model of `model_type`'s layout: its weights under transformers' names and its config.json keys."""
    cfg = model.config
    full = {"rope_type": "default", "rope_theta": cfg.positions.rope_theta}
    config = {
        **gemma_stack(cfg, cfg.n_encoder_layers),
        "sliding_window": cfg.attention.sliding_window or 4096,  # no layer slides without one (layer_types)
        "rope_parameters": full if model_type == "gemma2" else two_bases_written(cfg),
        "max_position_embeddings": cfg.positions.max,
        "use_bidirectional_attention": False,
        "tie_word_embeddings": cfg.embeddings.tie,
        "attention_dropout": cfg.dropout,
    }
    return NAMES.weights(model), config


LAYOUT = CausalLayout(load_hf_gemma, check_gemma_compatible, gemma_files, GEMMA_KEYS, config_from_gemma, NAMES)
SPM = ("tokenizer.model",)  # Gemma's SentencePiece model beside its tokenizer.json
FAMILIES = (
    LAYOUT.family(
        "gemma2", "Gemma2ForCausalLM", lambda cfg: cfg.norms.kind == "gemma_rmsnorm" and not cfg.attention.qk_norm, SPM
    ),
    # each head's queries and keys normed
    LAYOUT.family(
        "gemma3_text", "Gemma3ForCausalLM", lambda cfg: cfg.norms.kind == "gemma_rmsnorm" and cfg.attention.qk_norm, SPM
    ),
)
