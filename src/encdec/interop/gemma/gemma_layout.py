"""Gemma's stack, which Gemma 2, Gemma 3 and each of T5Gemma's and T5Gemma 2's stacks share (on Llama's:
interop/llama/llama_layout.py): the config class's defaults, the keys of the caps and attention scale, Gemma's
norm names, one stack's config.json keys written, the layer pattern of sliding and global layers, and Gemma 3's
two RoPE bases read and written.
"""

from encdec.errors import CheckpointError
from encdec.interop.family import first_set, id_keys
from encdec.interop.llama.llama_layout import STACK_KEYS, layer_names, norm_names, rope_kind, stack_sizes
from encdec.models import ModelConfig
from encdec.models.config_specs import overlaid
from encdec.schema import short

# T5GemmaModuleConfig's defaults (Gemma 2 2B's), for keys a stack's config leaves out: Gemma2Config's too
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
# Gemma's norms before and after a layer's feed-forward: ours -> the checkpoint's
FEED_FORWARD_NORMS = (("ffn_norm", "pre_feedforward_layernorm"), ("ffn_post_norm", "post_feedforward_layernorm"))
LAYER, HF_LAYER = "{side}.blocks.{i}.", "model.{side}.layers.{i}."
# Gemma's layer in each of T5Gemma's stacks, its self- and cross-attention (pre_ and post_{attn}_layernorm around each)
STACK_NAMES = (
    ("{side}.final_norm.weight", "model.{side}.norm.weight"),
    *layer_names(LAYER, HF_LAYER, attention="{attn}"),
    (LAYER + "{attn}_norm.weight", HF_LAYER + "pre_{attn}_layernorm.weight"),
    (LAYER + "{attn}_post_norm.weight", HF_LAYER + "post_{attn}_layernorm.weight"),
    *norm_names(LAYER, HF_LAYER, FEED_FORWARD_NORMS),
)
# ModelConfig field -> the stack config key it is read from (refusals name it)
GEMMA_STACK_KEYS = STACK_KEYS | {
    "attention.scale_dim": "query_pre_attn_scalar",
    "attention.softcap": "attn_logit_softcapping",
    "output.softcap": "final_logit_softcapping",
}


def gemma_fields(stack: dict, untied_head: bool) -> dict:
    """The ModelConfig fields of a Gemma stack's config that Gemma 2 and 3 and T5Gemma 1 and 2 read alike: Gemma's
    RMSNorm before and after each sublayer, gated GELU (tanh), RoPE, query_pre_attn_scalar's scale, embeddings
    times sqrt(hidden_size) (the head tied to them unless `untied_head`), no output scale, the logits capped at
    final_logit_softcapping."""
    return {
        "activation": "gated_gelu",
        "norms": {"kind": "gemma_rmsnorm", "eps": stack["rms_norm_eps"], "post": True},
        "attention": {"scale": True, "scale_dim": stack["query_pre_attn_scalar"]},
        "positions": {"kind": "rope"},
        "embeddings": {"scale": True, "tie": not untied_head},
        "output": {"scale": False, "softcap": stack["final_logit_softcapping"]},
    }


def encoder_decoder_fields(hf: dict, encoder: dict, decoder: dict, untied_head: bool, merged: bool = False) -> dict:
    """The ModelConfig fields T5Gemma and T5Gemma 2 read alike from their stacks: the decoder's sizes, each stack's
    depth, Gemma's stack, RoPE in self-attention alone (cross-attention `merged` with it in T5Gemma 2), and the ids, decoding starting at decoder_start_token_id
    where config.json sets one, else the decoder's bos_token_id, as transformers' generate reads them."""
    eos = decoder["eos_token_id"]
    stacks = {
        "vocab_size": decoder["vocab_size"],
        "d_model": decoder["hidden_size"],
        "d_ff": decoder["intermediate_size"],
        "n_heads": decoder["num_attention_heads"],
        "n_kv_heads": decoder["num_key_value_heads"],
        "d_head": decoder["head_dim"],
        "n_encoder_layers": encoder["num_hidden_layers"],
        "n_decoder_layers": decoder["num_hidden_layers"],
        "attention": {"softcap": decoder["attn_logit_softcapping"]},
        "cross_attention": {"rope": "none", "merged": merged},
        "dropout": hf.get("dropout_rate", 0.0),
        "pad_id": decoder["pad_token_id"],
        "eos_id": eos if isinstance(eos, int) else eos[0],
        "decoder_start_id": first_set(hf.get("decoder_start_token_id"), decoder["bos_token_id"]),
    }
    return overlaid(gemma_fields(decoder, untied_head), stacks)


def encoder_decoder_problems(cfg: ModelConfig) -> dict[str, bool]:
    """What keeps `cfg` from the Gemma stacks T5Gemma and T5Gemma 2 share, their attention and embeddings aside."""
    return {
        "positions.kind must be rope with cross_attention.rope none": cfg.positions.kind != "rope"
        or cfg.cross_attention.rope != "none",
        "norms.kind must be gemma_rmsnorm with norms.post": cfg.norms.kind != "gemma_rmsnorm" or not cfg.norms.post,
        "norms.position must be pre": cfg.norms.position != "pre",
        "activation must be gated_gelu": cfg.activation != "gated_gelu",
        "bias must be false": cfg.bias,
        "attention.scale must be true": not cfg.attention.scale,
        "embeddings.scale must be true": not cfg.embeddings.scale,
        "output.scale must be false": cfg.output.scale,
        "embeddings.norm must be false": cfg.embeddings.norm,
        "output.logits_bias must be false": cfg.output.logits_bias,
        "experts.count must be 1": cfg.experts.count != 1,
    }


def gemma_stack(cfg: ModelConfig, layers: int) -> dict:
    """The config.json keys of one Gemma stack of `layers` layers that Gemma 2 and 3, T5Gemma and T5Gemma 2 write
    alike (their RoPE and window keys differ)."""
    return {
        **stack_sizes(cfg, layers),
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": cfg.attention.scale_dim or cfg.head_dim,
        "attn_logit_softcapping": cfg.attention.softcap,
        "final_logit_softcapping": cfg.output.softcap,
        "layer_types": ["sliding_attention" if cfg.sliding_layer(i) else "full_attention" for i in range(layers)],
        "attention_bias": False,
    }


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


def two_bases(full: dict, sliding: dict, where: str = "") -> tuple[float, float, float]:
    """Gemma 3's (global base, global linear scale, sliding base) from the global and sliding layers' RoPE
    mappings, their bases set; a type other than default (and linear on the global layers) is one sentence."""
    for kind, values, allowed in (
        ("full_attention", full, ("default", "linear")),
        ("sliding_attention", sliding, ("default",)),
    ):
        if rope_kind(values) not in allowed:
            raise CheckpointError(
                f"config.json's {where}{kind} RoPE is of type {rope_kind(values)!r}; "
                f"encdec reads {' and '.join(allowed)} there"
            )
    scale = float(full["factor"]) if rope_kind(full) == "linear" else 1.0
    return float(full["rope_theta"]), scale, float(sliding["rope_theta"])


def two_bases_written(cfg: ModelConfig) -> dict:
    """Gemma 3's rope_parameters as transformers 5 writes them: the global layers' (scaled where rope_scale says)
    and the sliding layers'."""
    full = {"rope_type": "default", "rope_theta": cfg.positions.rope_theta}
    if cfg.positions.rope_scale != 1.0:
        full = {"rope_type": "linear", "rope_theta": cfg.positions.rope_theta, "factor": cfg.positions.rope_scale}
    sliding = {"rope_type": "default", "rope_theta": cfg.positions.rope_local_theta or cfg.positions.rope_theta}
    return {"full_attention": full, "sliding_attention": sliding}


def gemma_encoder_decoder(cfg: ModelConfig) -> dict:
    """The config.json keys beside the stacks that T5Gemma and T5Gemma 2 write alike."""
    return {
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.embeddings.tie,
        "dropout_rate": cfg.dropout,
        "attention_dropout": cfg.dropout,
        "is_encoder_decoder": True,
        "bos_token_id": cfg.decoder_start_id,
        **id_keys(cfg),
    }
