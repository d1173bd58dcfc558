"""A ModelConfig's specs (`model.experts`) read from their own shape and from the flat keys written before them
(config_specs.MOVED): a YAML model section, a `--set`, a preset's override, a fine-tuning overlay. A checkpoint's
flat model.json: tests/runs/test_sparse_layers.py."""

import dataclasses
import json

import pytest
import yaml

from encdec.errors import ConfigError
from encdec.models import Experts, ModelConfig, preset
from encdec.models.config_specs import MOVED
from encdec.runs.model_section import ModelSection
from encdec.training.run_config import load_config

FLAT = {"n_experts": 4, "moe_every": 2, "moe_top_k": 2, "moe_renormalize": True, "aux_loss_coef": 0.0}
NESTED = {"experts": {"count": 4, "every": 2, "top_k": 2, "renormalize": True, "aux_loss_coef": 0.0}}


def test_the_config_s_top_level_stays_small():
    """Settings that belong together are specs (issue 57: at most 30 top-level fields, from 55)."""
    assert len(dataclasses.fields(ModelConfig)) <= 30


def test_every_moved_key_names_a_field_of_its_spec():
    for old, place in MOVED.items():
        spec, key = place.split(".")
        assert key in ModelConfig.__dataclass_fields__[spec].default_factory.__dataclass_fields__, old


def test_a_flat_section_builds_the_config_its_nested_shape_builds():
    assert (
        ModelConfig.from_dict(FLAT)
        == ModelConfig.from_dict(NESTED)
        == ModelConfig(experts=Experts(**NESTED["experts"]))
    )
    assert ModelSection(FLAT).written == NESTED  # held in the new shape, as a run saves it
    assert preset("t5-tiny", **FLAT) == preset("t5-tiny", **NESTED)


@pytest.mark.parametrize("section", [FLAT, NESTED], ids=["flat", "nested"])
def test_an_old_style_set_overrides_either_shape(tmp_path, section):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": {"preset": "t5-tiny", **section}}))
    config = load_config(path, ["model.n_experts=8", "model.experts.top_k=1"])
    assert config.model.config.experts.count == 8 and config.model.config.experts.top_k == 1
    assert config.model.config.experts.every == 2


# each spec's old flat keys -> the same config in its shape (a run's model.json and --set: test_an_old_style_set...)
OLD_AND_NEW = {
    "output": ({"scale_output": False, "final_logits_bias": True}, {"output": {"scale": False, "logits_bias": True}}),
    "embeddings": (
        {"scale_embeddings": True, "embedding_norm": True, "tie_embeddings": False},
        {"embeddings": {"scale": True, "norm": True, "tie": False}},
    ),
    "norms": (
        {"norm": "layernorm", "norm_eps": 1e-5, "norm_position": "post", "post_norms": True},
        {"norms": {"kind": "layernorm", "eps": 1e-5, "position": "post", "post": True}},
    ),
    "positions": (
        {"position": "rope", "rope_theta": 500.0, "max_positions": 64, "relative_buckets": 16},
        {"positions": {"kind": "rope", "rope_theta": 500.0, "max": 64, "relative_buckets": 16}},
    ),
    "attention": (
        {"scale_attention": True, "attention_softcap": 20.0, "encoder_attention": "local", "local_radius": 8},
        {"attention": {"scale": True, "softcap": 20.0, "encoder": "local", "local_radius": 8}},
    ),
}


@pytest.mark.parametrize("spec", OLD_AND_NEW)
def test_each_spec_s_old_flat_keys_load_to_its_shape(tmp_path, spec):
    """Python, an old YAML model section and an old `--set model.<flat key>=` build the config of the new shape."""
    flat, nested = OLD_AND_NEW[spec]
    assert ModelConfig.from_dict(flat) == ModelConfig.from_dict(nested)
    expected = preset("t5-tiny", **nested)
    assert preset("t5-tiny", **flat) == expected
    old, plain = tmp_path / "old.yaml", tmp_path / "plain.yaml"
    old.write_text(yaml.safe_dump({"model": {"preset": "t5-tiny", **flat}}))
    plain.write_text(yaml.safe_dump({"model": {"preset": "t5-tiny"}}))
    loaded = load_config(old).model.config
    assert loaded == dataclasses.replace(expected, vocab_size=loaded.vocab_size)  # the tokenizer's
    old_sets = [f"model.{key}={json.dumps(value)}" for key, value in flat.items()]
    assert load_config(plain, old_sets).model.config == loaded


def test_a_key_set_both_ways_to_two_values_is_one_sentence():
    with pytest.raises(ConfigError) as refused:
        ModelConfig.from_dict({"n_experts": 4, "experts": {"count": 2}})
    assert str(refused.value) == "model.n_experts (4) is the old name of model.experts.count (2); set one of them"
    assert ModelConfig.from_dict({"n_experts": 4, "experts": {"count": 4}}).experts.count == 4  # the same: one


def test_a_spec_s_keys_are_checked_by_their_full_dotted_name():
    with pytest.raises(ConfigError, match=r"^unknown key model\.experts\.cuont; did you mean count\?$"):
        ModelConfig.from_dict({"experts": {"cuont": 2}})
    with pytest.raises(ConfigError, match=r"^model\.experts\.top_k must be a positive integer, got 0$"):
        ModelConfig(experts={"top_k": 0})
    with pytest.raises(ConfigError, match=r"^model\.experts must be a mapping, got 4$"):
        ModelConfig.from_dict({"experts": 4})


def test_a_fine_tuning_overlay_sets_a_spec_s_keys_over_the_base_s():
    overlay = ModelSection({"moe_top_k": 2}, overlay=True)
    built = overlay.over({"n_experts": 4, "moe_every": 2})
    assert built.config.experts == Experts(count=4, every=2, top_k=2)
