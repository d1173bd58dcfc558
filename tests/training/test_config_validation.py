"""A run config's model section is checked as a ModelConfig when the config loads, before any data is read."""

from pathlib import Path

import pytest
from work_kit import counted_calls

from encdec.errors import ConfigError
from encdec.training import run_data
from encdec.training.run_config import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MAIN = CONFIGS / "main.yaml"  # rot5-small: d_model 256, 8 heads, 2 KV heads, RoPE
SHIPPED = sorted(p for p in CONFIGS.rglob("*.yaml") if "experiments" not in p.relative_to(CONFIGS).parts)


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if loading a config reads data or builds a tokenizer."""

    def refuse(*args, **kwargs):
        raise AssertionError("load_config read data or built a tokenizer")

    for name in ("build_run_data", "read_items", "read_hub", "build_run_tokenizer", "build_tokenizer"):
        monkeypatch.setattr(run_data, name, refuse)


def test_kv_heads_not_dividing_heads_are_refused_at_load_without_reading_data(no_data):
    with counted_calls() as work, pytest.raises(ConfigError, match=r"model\.n_kv_heads \(3\) must divide model\."):
        load_config(MAIN, ["model.n_kv_heads=3"])
    assert work.calls < 200_000  # the file read and checked: about 34,000 calls here, a count no load stretches


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.n_heads=5", r"model\.n_heads \(5\) must divide model\.d_model \(256\)"),
        (
            "model.cross_n_kv_heads=3",
            r"model\.cross_attention\.n_kv_heads \(3\) must divide model\.cross_attention\.n_heads \(8\)",
        ),
        ("model.moe_top_k=2", r"model\.experts\.top_k \(2\) exceeds model\.experts\.count \(1\)"),
        ("model.dropout=1.5", r"model\.dropout must be in \[0, 1\), got 1\.5"),
        ("model.d_model=0", r"model\.d_model must be a positive integer, got 0"),
        ("model.position=absolute", r"model\.positions\.kind must be one of sinusoidal, learned, relative, rope"),
        ("model.d_head=15", r"^model: RoPE needs an even head dimension, got d_head 15$"),
        ("model.preset=t6-small", r"^model\.preset 't6-small' is unknown; did you mean t5-small\?$"),
        ("model.n_heads=eight", r"model\.n_heads must be an integer, got 'eight'"),
        ("model.d_modle=64", r"unknown key model\.d_modle; did you mean d_model\?"),
    ],
)
def test_model_section_is_checked_when_the_config_loads(no_data, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(MAIN, [override])


def test_a_valid_change_to_the_model_section_loads(no_data):
    config = load_config(MAIN, ["model.n_kv_heads=4", "model.n_experts=4", "model.moe_top_k=2"])
    assert config.model == {
        "preset": "rot5-small",
        "dropout": 0.0,
        "n_kv_heads": 4,
        "experts": {"count": 4, "top_k": 2},
    }


def test_a_model_section_without_preset_is_checked_too(no_data, tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text("model:\n  family: decoder_only\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 3\n")
    with pytest.raises(ConfigError, match=r"model\.n_kv_heads \(3\) must divide model\.n_heads \(4\)"):
        load_config(path)


def test_the_provisional_vocabulary_does_not_hide_the_sections_own(no_data):
    with pytest.raises(ConfigError, match=r"model\.vocab_size must be a positive integer, got 0"):
        load_config(MAIN, ["model.vocab_size=0"])


def test_a_fine_tuning_overlay_is_checked_once_merged_with_the_pretrained_section(no_data):
    """Its keys sit on top of the pretrained run's section (unknown until init_from is read): types only here."""
    config = load_config(CONFIGS / "recipes" / "dialogsum_finetune.yaml", ["model.n_heads=6"])
    assert config.model["n_heads"] == 6
    with pytest.raises(ConfigError, match=r"model\.n_heads must be an integer"):
        load_config(CONFIGS / "recipes" / "dialogsum_finetune.yaml", ["model.n_heads=six"])


def test_an_unknown_objective_is_refused_at_load(no_data):
    with pytest.raises(
        ConfigError,
        match=r"objective\.kind must be one of causal_lm, span_corruption, ul2, prefix_lm, "
        r"seq2seq, transcribe, got 'span'",
    ):
        load_config(MAIN, ["objective.kind=span"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["objective.kind=causal_lm"],
            r"objective\.pack works with objective\.kind seq2seq, span_corruption, ul2, "
            r"not causal_lm",
        ),
        (
            ["model.preset=decoder_only-tiny"],
            r"objective\.pack needs model\.family encoder_decoder, .* the decoder_only",
        ),
        (["model.preset=rnn_seq2seq-tiny"], r"the rnn_seq2seq family does not"),
        (["model.family=ar_encdec", "model.preset=ar_encdec-tiny"], r"the ar_encdec family does not"),
    ],
)
def test_pack_is_refused_at_load_where_examples_cannot_be_kept_apart(no_data, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(MAIN, ["objective.pack=true", *overrides])


def test_pack_loads_for_the_encoder_decoder_presets(no_data):
    for name in ("t5-small", "t5-v1.1-small", "rot5-small", "transformer-small"):
        assert load_config(MAIN, ["objective.pack=true", f"model.preset={name}"]).objective.pack


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_shipped_config_loads(no_data, path):
    load_config(path)


def test_a_field_the_family_does_not_use_is_refused_when_the_config_loads(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("model: {preset: decoder_only-tiny, n_decoder_layers: 3}\n")
    with pytest.raises(ConfigError, match="model.n_decoder_layers is not used by the decoder_only family"):
        load_config(config)
