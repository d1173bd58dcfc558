"""The parameter count (models/parameter_count.py) is the count of the model the config builds: of the model
built for real (weights initialised, tables computed) on drawn configs of every family, and of the whole model
where it is counted from smaller ones (many experts, many layers); every preset and every run config encdec size
accepts is counted as its meta-built model; a trillion parameters are counted without memory."""

import tracemalloc
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from encdec.errors import ConfigError
from encdec.models import (
    FAMILY_CLASSES,
    ModelConfig,
    build_model,
    count_parameters,
    parameter_count,
    preset,
    preset_names,
)
from encdec.models.config_specs import MOVED
from encdec.models.family_rules import UNUSED_BY_FAMILY, check_family
from encdec.models.parameter_count import count_parameters_of
from encdec.models.research_config import ResearchOptions

CONFIGS = Path(__file__).parents[2] / "configs"


def meta_counts(cfg: ModelConfig) -> tuple[int, int]:
    """The whole model's counts, built on the meta device as torch builds it (its init run there too)."""
    with torch.device("meta"):
        model = FAMILY_CLASSES[cfg.family](cfg)
    return count_parameters(model), count_parameters(model, exclude_positions=True)


def real_counts(cfg: ModelConfig) -> tuple[int, int]:
    model = build_model(cfg)  # on the CPU: weights initialised, position tables computed
    return count_parameters(model), count_parameters(model, exclude_positions=True)


def counted(cfg: ModelConfig) -> tuple[int, int]:
    count = count_parameters_of(cfg)
    return count.total, count.without_positions


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_is_counted_as_its_model(name):
    cfg = preset(name)
    assert counted(cfg) == (real_counts(cfg) if name.endswith("-tiny") else meta_counts(cfg))


def size_configs() -> list[Path]:
    """The run configs under configs/ (the experiment files beside them are not run configs)."""
    return sorted(p for p in CONFIGS.rglob("*.yaml") if "experiments" not in p.parts or "bases" in p.parts)


@pytest.mark.parametrize("path", size_configs(), ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_run_config_is_counted_as_its_model(path):
    from encdec.cli.size import model_config

    class Args:
        config, preset, set = str(path), None, []

    cfg = model_config(Args)  # every config's tokenizer is in the repository or ../shared/data
    check_family(cfg)
    assert counted(cfg) == meta_counts(cfg)


def test_each_family_table_entry_is_its_class_s_unused_set():
    assert {family: cls.UNUSED for family, cls in FAMILY_CLASSES.items()} == UNUSED_BY_FAMILY


maybe = st.none
SMALL = st.integers(1, 4)
RESEARCH = st.fixed_dictionaries(
    {
        "order_type": st.sampled_from(["ORIGINAL", "ALT"]),
        "sub_pos_embed": st.sampled_from(["NO", "YES_NO_LN", "YES_LN"]),
        "add_pos_embed_to_decoder": st.booleans(),
        "add_ln_before_decoder_ff": st.booleans(),
        "embedding_loss": st.sampled_from(["NONE", "MSE", "COSINE", "L1"]),
    }
)
LOSS = st.fixed_dictionaries(
    {
        "embedding_ln_type": st.sampled_from(["NONE", "INIT", "AVG_CUM_SUM"]),
        "use_ln_on_encoder_out": st.booleans(),
        "embedding_aggregation": st.sampled_from(["MEAN", "MATMUL"]),
        "embedding_norm_affine": st.booleans(),
    }
)


@st.composite
def family_configs(draw, layers: int = 3, experts: int = 3) -> ModelConfig:
    """A small config of any family, drawing only the fields that family uses, over the options that change its
    parameters: widths, heads (GQA, d_head, cross heads), depths, activation, norm and its place (post_norms),
    bias, position scheme and table size, experts and their layers, head tying, the encoder's own token table (of its
    own vocabulary), the research options and the RNN's cell and attention, LongT5's encoder attention (its global
    keys' bias and norms), the decoder-only family's attention biases and head norms; Gemma 2's caps and window,
    which add none."""
    family = draw(st.sampled_from(sorted(FAMILY_CLASSES)))
    causal = family in ("ar_encdec", "parallel_encdec", "decoder_only")
    n_heads = draw(SMALL)
    values = {
        "family": family,
        "vocab_size": draw(st.integers(3, 40)),
        "d_model": n_heads * draw(st.sampled_from([2, 4, 6])),
        "n_heads": n_heads,
        "n_kv_heads": draw(st.one_of(maybe(), st.sampled_from([k for k in (1, 2) if n_heads % k == 0]))),
        "d_head": draw(st.one_of(maybe(), st.sampled_from([2, 4, 6]))),
        "d_ff": draw(st.integers(1, 12)),
        "n_encoder_layers": draw(st.integers(1, layers)),
        "n_decoder_layers": draw(st.one_of(maybe(), st.integers(1, layers))),
        "cross_n_heads": draw(st.one_of(maybe(), st.sampled_from([1, 2, 4, 8]))),
        "cross_n_kv_heads": draw(st.one_of(maybe(), st.just(1))),
        "activation": draw(st.sampled_from(["relu", "gelu", "silu", "gated_gelu", "swiglu"])),
        "norm": draw(st.sampled_from(["rmsnorm", "layernorm", "gemma_rmsnorm"])),
        "norm_position": draw(st.sampled_from(["pre", "post"])),
        "post_norms": draw(st.booleans()),
        "shared_embeddings": draw(st.booleans()),
        "attention_softcap": draw(st.one_of(maybe(), st.just(50.0))),
        "logit_softcap": draw(st.one_of(maybe(), st.just(30.0))),
        "bias": draw(st.booleans()),
        "position": draw(
            st.sampled_from(["learned", "rope"] if causal else ["sinusoidal", "learned", "relative", "rope"])
        ),
        "max_positions": draw(st.integers(1, 12)),
        "position_offset": draw(st.integers(0, 2)),
        "embedding_norm": draw(st.booleans()),
        "relative_buckets": draw(st.integers(4, 8)),
        "relative_max_distance": draw(st.integers(5, 20)),
        "relative_bias_per_layer": draw(st.booleans()),
        "rope_cross": draw(st.sampled_from(["relative", "none"] if causal else ["relative", "prepended", "none"])),
        "tie_embeddings": draw(st.booleans()),
        "n_experts": draw(st.integers(1, experts)),
        "moe_every": draw(st.integers(1, 3)),
        "decoder_moe_every": draw(st.one_of(maybe(), st.integers(1, 3))),
        "moe_activation": draw(st.sampled_from(["relu", "gelu", "swiglu"])),
        "rnn_cell": draw(st.sampled_from(["gru", "lstm"])),
        "rnn_attention": draw(st.booleans()),
        "hf_model_type": draw(st.sampled_from([None, "mt5"])),
        "dropout": 0.0,
    }
    if family in ("ar_encdec", "parallel_encdec"):
        research = draw(RESEARCH)
        if research["embedding_loss"] != "NONE":
            research |= draw(LOSS)
        values["research"] = research
    if values["position"] != "rope":
        values.pop("rope_cross")
    if values["position"] != "relative":
        values.pop("relative_bias_per_layer")
    if values["position"] == "rope" and family == "encoder_decoder":  # Gemma 2's window, every other layer
        values |= {"sliding_window": draw(st.integers(1, 4)), "global_every": draw(st.integers(1, 3))}
        # T5Gemma 2's: norms of each head's queries and keys, the decoder's attentions merged, a token's own vector
        values |= {"qk_norm": draw(st.booleans()), "merged_cross_attention": draw(st.booleans())}
        values |= {"eoi_token_id": draw(st.one_of(maybe(), st.just(0)))}
        if values["merged_cross_attention"]:
            values |= {"rope_cross": "none", "cross_n_heads": None, "cross_n_kv_heads": None}
    if family == "decoder_only":  # Qwen2's biases on q, k and v (or Llama's on all four), Qwen3's head norms
        values |= {"attention_bias": draw(st.sampled_from(["none", "qkv", "qkvo"])), "qk_norm": draw(st.booleans())}
    if family == "encoder_decoder":  # LongT5's encoder: local, or local and global keys (with a relative bias);
        # LED's: local and global tokens with their own projections, and an encoder's own position table
        values["encoder_attention"] = draw(st.sampled_from(["full", "local", "transient_global", "local_global"]))
        values["encoder"] = {"max_positions": draw(st.one_of(st.none(), st.integers(1, 40)))}
        if not values["shared_embeddings"]:  # FSMT's: the encoder's own table of its own vocabulary
            values["encoder"]["vocab_size"] = draw(st.one_of(maybe(), st.integers(3, 40)))
    if family == "rnn_seq2seq":
        values["n_decoder_layers"] = None
    unused = UNUSED_BY_FAMILY[family]  # a spec's field (MOVED: n_experts is experts.count) or the whole spec
    values = {k: v for k, v in values.items() if not {MOVED.get(k, k), MOVED.get(k, k).split(".")[0]} & unused}
    try:
        cfg = ModelConfig.from_dict(values)
        check_family(cfg)
    except ConfigError:
        assume(False)
    return cfg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(family_configs())
def test_a_drawn_config_of_any_family_is_counted_as_its_model_built_for_real(cfg):
    assert counted(cfg) == real_counts(cfg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(family_configs(layers=9, experts=7))
def test_a_count_from_smaller_models_is_the_whole_model_s(cfg):
    """Past 2 experts and 2 layers a stack (MOST_EXPERTS, MOST_LAYERS lowered so that drawn configs reach them),
    counted from models of 2 and 3 experts and of whole periods of layers fewer: the whole model's count."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parameter_count, "MOST_EXPERTS", 2)
        patch.setattr(parameter_count, "MOST_LAYERS", 2)
        assert counted(cfg) == meta_counts(cfg)


def test_a_trillion_parameters_are_counted_without_memory_from_few_layers_and_experts(monkeypatch):
    """64 layers a stack, every other one of 2,048 experts, d_model 4,096: 1.76 * 10^13 parameters, counted
    from models of at most 3 experts and MOST_LAYERS layers, in a few MB of Python memory; what the experts add
    to the dense model is 64 sparse layers' routers and experts less their dense feed-forwards."""
    sizes = dict(d_model=4096, d_ff=16384, n_heads=32, n_encoder_layers=64)
    cfg, dense = preset("rot5-base", n_experts=2048, moe_every=2, **sizes), preset("rot5-base", **sizes)
    whole, built = FAMILY_CLASSES["encoder_decoder"], []
    monkeypatch.setitem(parameter_count.FAMILY_CLASSES, "encoder_decoder", lambda c: built.append(c) or whole(c))
    tracemalloc.start()
    try:
        count = count_parameters_of(cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak / 2**20:.0f} MB"
    assert max(c.experts.count for c in built) == 3
    assert max(c.n_encoder_layers for c in built) <= parameter_count.MOST_LAYERS
    d, ff, gelu = 4096, 16384, 2  # rot5's feed-forwards and experts: GELU, two matrices, no bias
    added = 64 * (d * 2048 + 2048 * gelu * d * ff - gelu * d * ff)
    assert count.total - count_parameters_of(dense).total == added and count.total > 1.7e13


def test_a_model_past_what_torch_counts_is_one_sentence():
    with pytest.raises(ConfigError, match="more than any tensor library counts"):
        count_parameters_of(preset("t5-tiny", d_model=2**40))


def test_research_loss_parameters_are_counted():
    """The embedding loss's own parameters: affine LayerNorms and the MATMUL mixing matrix (P^2)."""
    options = dict(embedding_loss="MSE", embedding_aggregation="MATMUL", embedding_ln_type="INIT")
    cfg = preset("ar_encdec-tiny", research=ResearchOptions(**options))
    plain = preset("ar_encdec-tiny", research=ResearchOptions(embedding_loss="MSE"))
    assert count_parameters_of(cfg).total - count_parameters_of(plain).total == cfg.positions.max**2
    assert counted(cfg) == real_counts(cfg)
