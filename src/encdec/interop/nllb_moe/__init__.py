"""Hugging Face NLLB-MoE checkpoints (model_type nllb-moe: NllbMoeForConditionalGeneration) <-> encdec's pre-norm
encoder-decoder with fairseq's positions and experts.

NLLB-MoE (NLLB Team 2022) is M2M100 / NLLB (interop/m2m100/) whose every `encoder_sparse_step`-th feed-forward
(the decoder's every `decoder_sparse_step`-th; layer i when (i + 1) % step == 0: experts.place last) is a mixture
of experts with biases and the model's activation, routed top-2 with gates renormalised and a capacity, as
fairseq's and transformers' NllbMoeTop2Router route (modules.moe.Routing: expert_capacity in training,
moe_eval_capacity_token_fraction of a forward's tokens in evaluation, second_expert_policy,
normalize_router_prob_before_dropping, batch_prioritized_routing, moe_token_dropout; padding takes no expert
unless router_ignore_padding_tokens). Its names are BART's (interop/bart/bart_layout.py) but for the cross-attention
(`cross_attention`) and the feed-forward (`ffn.fc1`, `ff_layer_norm`, `ffn.router.classifier`,
`ffn.experts.expert_{e}`).

Evaluation (generation) computes what transformers' does, and so does training with the same draws: its loss is
the cross-entropy plus router_aux_loss_coef times each stack's load balance over both choices of the real tokens
(experts.balance all), with no z-loss (read as experts.z_loss_coef 0). What differs, in training alone: the random
draws of `random` and `sampling` (the same rules, other streams; transformers adds the Gumbel noise to the logits
its loss reads too, and `random` with normalize_router_prob_before_dropping weighs the second expert by its raw
probability), layer drop (encdec has none), and transformers keeps the evaluation's capacity for later training
forwards. A checkpoint with no sparse layer in either stack (a step of 0, or above the stack's depth) is the dense
model transformers computes, read and written so; one stack without them beside one with them is refused, as is
expert_capacity null (transformers then takes 2 * ceil(tokens / experts)).
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.bart import bart_layout
from encdec.interop.bart.bart_layout import HF_LAYER, LAYER
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_weights_with_shared
from encdec.interop.family import Family, NameMap, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig

DROPLESS_CAPACITY = 2**31 - 1  # expert_capacity written for a model that routes every token in training
# our Experts field -> its config.json key, where the value is written as it is
ROUTING_KEYS = {
    "eval_capacity_fraction": "moe_eval_capacity_token_fraction",
    "second_expert_policy": "second_expert_policy",
    "normalize_before_dropping": "normalize_router_prob_before_dropping",
    "batch_prioritized": "batch_prioritized_routing",
    "token_dropout": "moe_token_dropout",
    "aux_loss_coef": "router_aux_loss_coef",
}
DEFAULTS = {  # NllbMoeConfig's, where they differ from BART's, and of the keys above
    "pad_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "scale_embedding": True,
    "activation_function": "relu",
    "moe_eval_capacity_token_fraction": 1.0,
    "second_expert_policy": "all",
    "normalize_router_prob_before_dropping": False,
    "batch_prioritized_routing": False,
    "moe_token_dropout": 0.2,
    "router_aux_loss_coef": 0.001,
}

# BART's names, NLLB-MoE's cross-attention and feed-forward named its way, and its experts
RENAMED = (
    ("encoder_attn", "cross_attention"),
    ("fc1", "ffn.fc1"),
    ("fc2", "ffn.fc2"),
    ("final_layer_norm", "ff_layer_norm"),
)


def nllb_moe_name(bart_name: str) -> str:
    for old, new in RENAMED:
        bart_name = bart_name.replace(f".{old}", f".{new}")
    return bart_name


NAMES = NameMap("NLLB-MoE", tuple((ours, nllb_moe_name(theirs)) for ours, theirs in bart_layout.NAMES.pairs)).plus(
    "NLLB-MoE",
    (LAYER + "ffn.router.weight", HF_LAYER + "ffn.router.classifier.weight"),
    (LAYER + "ffn.experts.{e}.wi.{wb}", HF_LAYER + "ffn.experts.expert_{e}.fc1.{wb}"),
    (LAYER + "ffn.experts.{e}.wo.{wb}", HF_LAYER + "ffn.experts.expert_{e}.fc2.{wb}"),
)


def sparse_step(hf: dict, side: str, layers: int) -> int | None:
    """A stack's step of sparse layers; None where it leaves the stack none (0, or above its depth)."""
    step = hf.get(f"{side}_sparse_step", 4)
    return step if 0 < step <= layers else None


def nllb_moe_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    """M2M100's config with experts where the sparse steps put them, routed as the router keys say; with no sparse
    layer in either stack, the dense model transformers computes. Read with hf_model_type nllb-moe, as it exports."""
    hf = {**DEFAULTS, **hf}
    fairseq = {"position": "sinusoidal", "sinusoidal_layout": "fairseq", "final_logits_bias": False}
    cfg = bart_layout.layout_config(hf, untied_head, norm_position="pre", hf_model_type="nllb-moe", **fairseq)
    if hf.get("router_bias") or hf.get("router_dtype", "float32") != "float32":
        raise CheckpointError("router_bias and router_dtype must be false and float32, as encdec's router computes")
    if hf.get("expert_capacity", 64) is None:
        raise CheckpointError("expert_capacity is null (2 * ceil(tokens / experts) in transformers); set it")
    steps = {
        side: sparse_step(hf, side, layers)
        for side, layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.decoder_layers))
    }
    if set(steps.values()) == {None}:
        return cfg
    for side, step in steps.items():
        if step is None:
            raise CheckpointError(
                f"{side}_sparse_step {hf.get(f'{side}_sparse_step', 4)} leaves the {side} without experts where the "
                "other stack has some, which encdec's experts do not express"
            )
    experts = {
        "count": hf.get("num_experts", 128),
        "every": steps["encoder"],
        "decoder_every": steps["decoder"] if steps["decoder"] != steps["encoder"] else None,
        "place": "last",
        "top_k": 2,
        "renormalize": True,
        "activation": cfg.activation,
        "capacity": hf.get("expert_capacity", 64),
        "route_padding": hf.get("router_ignore_padding_tokens", False),
        "balance": "all",  # transformers' loss: both choices over the real tokens, and no z-loss
        "z_loss_coef": 0.0,
        **{ours: hf[theirs] for ours, theirs in ROUTING_KEYS.items()},
    }
    return ModelConfig(**{**cfg.to_dict(), "experts": experts})


def load_hf_nllb_moe(path: Path, hf_config: dict) -> EncoderDecoder:
    check_hf_model_fits(nllb_moe_config_from_hf(hf_config, True), path)
    weights = read_weights_with_shared(path, prefix="model.")
    untied = "lm_head.weight" in weights and not torch.equal(weights["lm_head.weight"], weights["model.shared.weight"])
    return fill_from_hf(EncoderDecoder(nllb_moe_config_from_hf(hf_config, untied)), weights, NAMES.hf, path)


def check_nllb_moe_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings NLLB-MoE's layout does not have."""
    experts = cfg.experts
    wrong_layers = any(
        [cfg.moe_layer(i, side == "decoder") for i in range(layers)]
        != [(i + 1) % experts.step(side == "decoder") == 0 for i in range(layers)]
        for side, layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.decoder_layers))
    )
    sparse = experts.count > 1  # a dense model is written with no sparse layer
    problems = {
        "positions.kind must be sinusoidal with positions.sinusoidal_layout fairseq": cfg.positions.kind != "sinusoidal"
        or cfg.positions.sinusoidal_layout != "fairseq",
        "embeddings.norm must be false": cfg.embeddings.norm,
        "output.logits_bias must be false": cfg.output.logits_bias,
        "experts.top_k must be 2 with experts.renormalize true": sparse
        and (experts.top_k != 2 or not experts.renormalize),
        f"experts.activation must equal activation ({cfg.activation})": sparse and experts.activation != cfg.activation,
        "the sparse layers must be the last of each step (experts.place last)": sparse and wrong_layers,
    }
    failed = [text for text, bad in problems.items() if bad]
    failed += [text for text in bart_layout.layout_problems(cfg, "pre") if not text.startswith("experts.count")]
    if failed:
        raise Unmet("this model cannot be saved as Hugging Face NLLB-MoE: {unmet}", failed)


def nllb_moe_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A pre-norm model with fairseq's positions and experts as NLLB-MoE's weights and config.json keys."""
    cfg, experts = model.config, model.config.experts
    weights = NAMES.weights(model)
    if not cfg.embeddings.tie:  # with tie_word_embeddings false transformers ties no embeddings at all
        for side in ("encoder", "decoder"):
            weights[f"model.{side}.embed_tokens.weight"] = weights["model.shared.weight"].clone()
    config = {
        **bart_layout.layout_hf_config(cfg),
        "num_experts": experts.count,
        "encoder_sparse_step": experts.step() if experts.count > 1 else 0,
        "decoder_sparse_step": experts.step(decoder=True) if experts.count > 1 else 0,
        "expert_capacity": experts.capacity or DROPLESS_CAPACITY,
        "router_ignore_padding_tokens": experts.route_padding,
        "router_bias": False,
        "router_dtype": "float32",
        "router_z_loss_coef": experts.z_loss_coef,  # which transformers does not apply
        **{theirs: getattr(experts, ours) for ours, theirs in ROUTING_KEYS.items()},
    }
    return weights, config


FAMILIES = (
    Family(
        "nllb-moe",
        "NllbMoeForConditionalGeneration",
        load_hf_nllb_moe,
        check_nllb_moe_compatible,
        nllb_moe_files,
        lambda cfg: bart_layout.fairseq_positions(cfg) and cfg.experts.count > 1,
        bart_layout.BART_KEYS | {"experts.count": "num_experts", "experts.capacity": "expert_capacity"},
        ("sentencepiece.bpe.model",),  # NLLB's
        config_read_alone(nllb_moe_config_from_hf),
        names=lambda cfg: NAMES,
    ),
)
