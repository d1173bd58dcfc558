"""Hugging Face SwitchTransformers checkpoints <-> encdec's T5 with a mixture of experts.

SwitchTransformers (Fedus et al. 2021) is T5 v1.0 / v1.1 whose sparse feed-forwards are top-1
mixtures of non-gated experts, each expert's output times its raw router probability (softmax
in fp32): encdec's `MoE` with experts.top_k 1 and gates not renormalised. Which layers are sparse
is each stack's step, num_layers // num_sparse_*_layers (layer i is sparse when i % step == 1,
every layer with a step of 1): Google's releases make every other one sparse (step 2), read
into experts.every / experts.decoder_every (ModelConfig.moe_layer); the dense ones are T5's wi -> act
-> wo with the experts' activation (dense_act_fn).

Expert capacity: transformers lets an expert take at most `expert_capacity` tokens of a sequence
(64 in the releases) and passes the tokens past it through the residual alone, also at
evaluation; encdec's dispatch is dropless, so the two agree while no expert gets more than
expert_capacity tokens of one sequence and differ past it (a cached decoding step, one token a
sequence, never drops in either). An export writes a capacity no sequence reaches, so that
transformers computes what encdec does. Router jitter is training noise encdec's router has
none of: read as 0, written as 0. A checkpoint of one expert is the dense T5 it computes (a softmax over one
expert is 1, whatever the router says): read as experts.count 1, as any other source of that count is, its expert's
weights the feed-forward's, and written back as T5. transformers itself is not needed.
"""

import logging
import re
from pathlib import Path

import torch

from encdec.errors import ConfigError, Unmet, listed
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_weights_with_shared
from encdec.interop.family import Family
from encdec.interop.t5.t5_layout import (
    NAMES,
    OUR_ACTIVATIONS,
    T5_KEYS,
    config_from_hf,
    deeper_decoder,
    layout_config,
    layout_problems,
    layout_weights,
)
from encdec.models import EncoderDecoder, ModelConfig

log = logging.getLogger(__name__)

# Hugging Face's expert is wi -> act -> wo: our non-gated expert activations and their ACT2FN names
OUR_EXPERT_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new"}
DROPLESS_CAPACITY = 2**31 - 1  # tokens one expert may take per sequence: more than any sequence has
# each stack's config.json keys: its layers, its sparse layers
STACK_KEYS = {
    "encoder": ("num_layers", "num_sparse_encoder_layers"),
    "decoder": ("num_decoder_layers", "num_sparse_decoder_layers"),
}

# T5's attention, norms and embeddings, the dense feed-forwards (mlp.wi, mlp.wo) and the experts
SWITCH_NAMES = NAMES.where(lambda ours, theirs: "DenseReluDense" not in theirs).plus(
    "SwitchTransformers",
    ("encoder.blocks.{i}.ffn.router.weight", "encoder.block.{i}.layer.1.mlp.router.classifier.weight"),
    (
        "encoder.blocks.{i}.ffn.experts.{e}.{wio}.weight",
        "encoder.block.{i}.layer.1.mlp.experts.expert_{e}.{wio}.weight",
    ),
    ("encoder.blocks.{i}.ffn.{wio}.weight", "encoder.block.{i}.layer.1.mlp.{wio}.weight"),
    ("decoder.blocks.{i}.ffn.router.weight", "decoder.block.{i}.layer.2.mlp.router.classifier.weight"),
    (
        "decoder.blocks.{i}.ffn.experts.{e}.{wio}.weight",
        "decoder.block.{i}.layer.2.mlp.experts.expert_{e}.{wio}.weight",
    ),
    ("decoder.blocks.{i}.ffn.{wio}.weight", "decoder.block.{i}.layer.2.mlp.{wio}.weight"),
)
ONE_EXPERT = re.compile(r"(\.mlp\.)experts\.expert_0\.")  # a one-expert checkpoint's expert, its layer's mlp


def sparse_layers(layers: int, step: int) -> list[int]:
    """The sparse layers of a stack of `layers` with a sparse step `step` (transformers' rule, ModelConfig's)."""
    return [i for i in range(layers) if i % step == 1 % step]


def sparse_step(hf_config: dict, side: str) -> int:
    """A stack's sparse step as transformers derives it: num_layers // num_sparse (num_layers when 0)."""
    layers_key, sparse_key = STACK_KEYS[side]
    layers = hf_config.get(layers_key) or hf_config["num_layers"]
    sparse = hf_config.get(sparse_key, 3)
    step = layers // sparse if sparse > 0 else layers
    if step == 0:
        raise ConfigError(
            f"{sparse_key} ({sparse}) exceeds the {side}'s {layers} layers, which transformers reads as no sparse "
            "layer; encdec puts experts in at least one layer of each stack"
        )
    return step


def sparse_count(layers: int, step: int) -> int:
    """The num_sparse_*_layers transformers reads back as `step`'s layout over `layers`: the sparse layers'
    count where it gives that layout (Google's configs), else another that does (ConfigError if none)."""
    wanted = sparse_layers(layers, step)
    counts = (len(wanted), *range(1, layers + 1))
    count = next((n for n in counts if sparse_layers(layers, layers // n) == wanted), None)
    if count is None:
        raise ConfigError(
            f"this model cannot be saved as Hugging Face SwitchTransformers: a sparse step of {step} over {layers} "
            f"layers (layers {listed([str(n) for n in wanted], budget=40)}) is no num_layers // num_sparse layout"
        )
    return count


def check_switch_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings SwitchTransformers cannot express."""
    dense = any(not cfg.moe_layer(i) for i in range(cfg.n_encoder_layers)) or any(
        not cfg.moe_layer(i, decoder=True) for i in range(cfg.decoder_layers)
    )
    experts = cfg.experts
    problems = {
        "experts.count must be greater than 1 (a dense model exports as T5)": experts.count < 2,
        f"experts.top_k must be 1 (Hugging Face routes each token to one expert), got {experts.top_k}": experts.top_k
        != 1,
        "experts.renormalize must be false (Hugging Face weighs an expert by its raw router probability)": (
            experts.renormalize
        ),
        f"experts.activation must be one of {', '.join(OUR_EXPERT_ACTIVATIONS)} (Hugging Face's experts are not "
        f"gated), got {experts.activation}": experts.activation not in OUR_EXPERT_ACTIVATIONS,
        f"activation must equal experts.activation ({experts.activation}) in the dense layers, got {cfg.activation}": (
            dense and cfg.activation != experts.activation
        ),
    }
    failed = [text for text, bad in problems.items() if bad] + layout_problems(cfg)
    if failed:
        raise Unmet("this model cannot be saved as Hugging Face SwitchTransformers: {unmet}", failed)
    sparse_count(cfg.n_encoder_layers, experts.step())
    sparse_count(cfg.decoder_layers, experts.step(decoder=True))


def switch_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A T5-layout MoE model's weights under SwitchTransformers' names and its config.json keys."""
    cfg = model.config
    weights = layout_weights(model, SWITCH_NAMES)
    if not cfg.output.scale:  # with tie_word_embeddings false, transformers ties no stack's embeddings either
        for side in ("encoder", "decoder"):
            weights[f"{side}.embed_tokens.weight"] = weights["shared.weight"].clone()
    config = {
        **layout_config(cfg),
        "num_sparse_encoder_layers": sparse_count(cfg.n_encoder_layers, cfg.experts.every),
        "num_sparse_decoder_layers": sparse_count(cfg.decoder_layers, cfg.experts.step(decoder=True)),
        "num_experts": cfg.experts.count,
        "expert_capacity": DROPLESS_CAPACITY,
        "router_bias": False,
        "router_jitter_noise": 0.0,
        "router_dtype": "float32",
        "router_ignore_padding_tokens": False,
        "router_z_loss_coef": cfg.experts.z_loss_coef,
        "router_aux_loss_coef": cfg.experts.aux_loss_coef,
        "dense_act_fn": OUR_EXPERT_ACTIVATIONS[cfg.experts.activation],
    }
    return weights, config


def load_hf_switch(path: Path, hf_config: dict) -> EncoderDecoder:
    """Read a SwitchTransformers directory, its sparse layers where its config.json puts them."""
    check_hf_model_fits(switch_model_config(hf_config), path)
    weights = read_weights_with_shared(path)  # one table for both stacks, as encdec has it, or refused
    untied = hf_config.get("tie_word_embeddings", True) is False and "lm_head.weight" in weights
    capacity = hf_config.get("expert_capacity", 64)
    if capacity < DROPLESS_CAPACITY:
        log.info(
            "%s: expert_capacity %s is not applied: encdec routes every token, where transformers passes the "
            "tokens of a sequence past an expert's capacity through the residual alone",
            path,
            capacity,
        )
    model = EncoderDecoder(switch_model_config(hf_config, untied))
    if model.config.experts.count == 1:  # each sparse layer's one expert is its dense feed-forward; the router is moot
        weights = {ONE_EXPERT.sub(r"\1", name): tensor for name, tensor in weights.items() if ".router." not in name}
    return fill_from_hf(model, weights, SWITCH_NAMES.hf, path)


def switch_model_config(hf_config: dict, untied: bool | None = None) -> ModelConfig:
    """The ModelConfig of a SwitchTransformers config.json, its head untied where `untied` says (None: where
    tie_word_embeddings is false); what encdec cannot compute is one ConfigError sentence."""
    if hf_config.get("router_bias"):
        raise ConfigError("router_bias is set, which encdec's router does not have")
    if hf_config.get("router_dtype", "float32") != "float32":
        raise ConfigError(f"router_dtype is {hf_config['router_dtype']!r}, but encdec's router computes in float32")
    activation = hf_config.get("dense_act_fn", "relu")
    ours = {v: k for k, v in OUR_EXPERT_ACTIVATIONS.items()} | {"gelu_pytorch_tanh": "gelu_tanh"}
    if activation not in ours:
        raise ConfigError(f"unsupported SwitchTransformers dense_act_fn {activation!r}; supported: {', '.join(ours)}")
    if untied is None:
        untied = hf_config.get("tie_word_embeddings", True) is False
    proj = OUR_ACTIVATIONS[ours[activation]]  # the dense feed-forwards' activation: dense_act_fn as well
    cfg = config_from_hf({**hf_config, "feed_forward_proj": proj, "scale_decoder_outputs": not untied}, untied)
    experts = hf_config.get("num_experts", 8)  # as given: ModelConfig's declaration checks it (T5_KEYS names it)
    if type(experts) is int and experts == 1:  # the dense model one expert computes: T5's, experts.count 1
        return cfg
    encoder_step, decoder_step = sparse_step(hf_config, "encoder"), sparse_step(hf_config, "decoder")
    ours_experts = {
        "count": experts,
        "every": encoder_step,
        "decoder_every": decoder_step if decoder_step != encoder_step else None,
        "top_k": 1,
        "renormalize": False,
        "activation": ours[activation],
        "aux_loss_coef": hf_config.get("router_aux_loss_coef", 0.001),
        "z_loss_coef": hf_config.get("router_z_loss_coef", 0.001),
    }
    return ModelConfig(**{**cfg.to_dict(), "experts": ours_experts})


FAMILIES = (
    Family(
        "switch_transformers",
        "SwitchTransformersForConditionalGeneration",
        load_hf_switch,
        check_switch_compatible,
        switch_files,
        lambda cfg: cfg.positions.kind == "relative" and cfg.experts.count > 1,
        T5_KEYS,
        ("spiece.model",),
        switch_model_config,
        names=lambda cfg: SWITCH_NAMES,
        note=deeper_decoder,
    ),
)
