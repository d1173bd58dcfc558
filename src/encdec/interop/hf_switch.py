"""Hugging Face SwitchTransformers checkpoints <-> encdec's T5 with a mixture of experts.

SwitchTransformers (Fedus et al. 2021) is T5 v1.0 / v1.1 whose feed-forwards are
top-1 mixtures of non-gated experts, each expert's output times its raw router
probability (softmax in fp32): encdec's `MoE` with moe_top_k 1 and gates not
renormalised. encdec makes every feed-forward sparse, so both stacks are written
with a sparse step of 1, and with an expert capacity no sequence reaches, so Hugging
Face drops no token, as encdec's dropless dispatch never does. Router jitter is 0:
encdec's router has none. transformers itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, ConfigError
from encdec.interop.hf_t5 import (
    NAME_MAP,
    OUR_ACTIVATIONS,
    check_hf_model_fits,
    config_from_hf,
    fill_from_hf,
    read_weights_with_shared,
    t5_layout_config,
    t5_layout_problems,
    t5_layout_weights,
)
from encdec.interop.hf_t5 import hf_name as t5_name
from encdec.models import EncoderDecoder, ModelConfig

# Hugging Face's expert is wi -> act -> wo: our non-gated expert activations and their ACT2FN names
OUR_EXPERT_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new"}
DROPLESS_CAPACITY = 2**31 - 1  # tokens one expert may take per sequence: more than any sequence has

# (our parameter name pattern, Hugging Face name pattern): T5's attention, norms and embeddings, plus the experts
SWITCH_NAME_MAP = [(ours, theirs) for ours, theirs in NAME_MAP if "DenseReluDense" not in theirs] + [
    (r"encoder\.blocks\.(\d+)\.ffn\.router\.weight", r"encoder.block.\1.layer.1.mlp.router.classifier.weight"),
    (
        r"encoder\.blocks\.(\d+)\.ffn\.experts\.(\d+)\.(wi|wo)\.weight",
        r"encoder.block.\1.layer.1.mlp.experts.expert_\2.\3.weight",
    ),
    (r"decoder\.blocks\.(\d+)\.ffn\.router\.weight", r"decoder.block.\1.layer.2.mlp.router.classifier.weight"),
    (
        r"decoder\.blocks\.(\d+)\.ffn\.experts\.(\d+)\.(wi|wo)\.weight",
        r"decoder.block.\1.layer.2.mlp.experts.expert_\2.\3.weight",
    ),
]


def hf_name(our_name: str) -> str:
    return t5_name(our_name, SWITCH_NAME_MAP, "SwitchTransformers")


def check_switch_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the first setting SwitchTransformers cannot express."""
    problems = {
        "n_experts must be greater than 1 (a dense model exports as T5)": cfg.n_experts < 2,
        f"moe_top_k must be 1 (Hugging Face routes each token to one expert), got {cfg.moe_top_k}": cfg.moe_top_k != 1,
        "moe_renormalize must be false (Hugging Face weighs an expert by its raw router probability)": cfg.moe_renormalize,
        f"moe_activation must be one of {', '.join(OUR_EXPERT_ACTIVATIONS)} (Hugging Face's experts are not gated), "
        f"got {cfg.moe_activation}": cfg.moe_activation not in OUR_EXPERT_ACTIVATIONS,
    }
    failed = [text for text, bad in problems.items() if bad] + t5_layout_problems(cfg)
    if failed:
        raise ConfigError(f"this model cannot be saved as Hugging Face SwitchTransformers: {failed[0]}")


def switch_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A T5-layout MoE model's weights under SwitchTransformers' names and its config.json keys."""
    cfg = model.config
    weights = t5_layout_weights(model, hf_name)
    if not cfg.scale_output:  # with tie_word_embeddings false, transformers ties no stack's embeddings either
        for side in ("encoder", "decoder"):
            weights[f"{side}.embed_tokens.weight"] = weights["shared.weight"].clone()
    config = {
        **t5_layout_config(cfg),
        "num_sparse_encoder_layers": cfg.n_encoder_layers,  # every layer sparse: a sparse step of 1
        "num_sparse_decoder_layers": cfg.decoder_layers,
        "num_experts": cfg.n_experts,
        "expert_capacity": DROPLESS_CAPACITY,
        "router_bias": False,
        "router_jitter_noise": 0.0,
        "router_dtype": "float32",
        "router_ignore_padding_tokens": False,
        "router_z_loss_coef": cfg.z_loss_coef,
        "router_aux_loss_coef": cfg.aux_loss_coef,
        "dense_act_fn": OUR_EXPERT_ACTIVATIONS[cfg.moe_activation],
    }
    return weights, config


def load_hf_switch(path: Path, hf_config: dict) -> EncoderDecoder:
    """Read a SwitchTransformers directory whose every feed-forward is sparse (as encdec writes them)."""
    for side, layers, sparse in (
        ("encoder", "num_layers", "num_sparse_encoder_layers"),
        ("decoder", "num_decoder_layers", "num_sparse_decoder_layers"),
    ):
        total = hf_config.get(layers) or hf_config["num_layers"]
        if hf_config.get(sparse, 3) != total:
            raise CheckpointError(
                f"{path}: {hf_config.get(sparse, 3)} of the {total} {side} layers are sparse, "
                "but encdec makes every feed-forward a mixture of experts"
            )
    if hf_config.get("router_bias"):
        raise CheckpointError(f"{path}: router_bias is set, which encdec's router does not have")
    activation = hf_config.get("dense_act_fn", "relu")
    ours = {v: k for k, v in OUR_EXPERT_ACTIVATIONS.items()} | {"gelu_pytorch_tanh": "gelu_tanh"}
    if activation not in ours:
        supported = ", ".join(ours)
        raise CheckpointError(f"unsupported SwitchTransformers dense_act_fn {activation!r}; supported: {supported}")
    check_hf_model_fits(switch_config(hf_config, ours[activation], True), path)
    weights = read_weights_with_shared(path)
    head = weights.get("lm_head.weight")
    untied = hf_config.get("tie_word_embeddings", True) is False and head is not None
    model = EncoderDecoder(switch_config(hf_config, ours[activation], untied))
    return fill_from_hf(model, weights, hf_name, path)


def switch_config(hf_config: dict, expert_activation: str, untied: bool) -> ModelConfig:
    """The ModelConfig of a SwitchTransformers config.json whose experts use `expert_activation` (ours)."""
    proj = OUR_ACTIVATIONS[expert_activation]  # the dense activation, unused when every feed-forward is sparse
    cfg = config_from_hf({**hf_config, "feed_forward_proj": proj, "scale_decoder_outputs": not untied}, untied)
    return ModelConfig(
        **{
            **cfg.to_dict(),
            "n_experts": hf_config.get("num_experts", 8),
            "moe_top_k": 1,
            "moe_renormalize": False,
            "moe_activation": expert_activation,
            "aux_loss_coef": hf_config.get("router_aux_loss_coef", 0.001),
            "z_loss_coef": hf_config.get("router_z_loss_coef", 0.001),
        }
    )
