import pytest

from encdec.errors import ConfigError
from encdec.models import ModelConfig, preset, preset_names


@pytest.mark.parametrize(
    "values,message",
    [
        (dict(d_model=100, n_heads=3), "n_heads (3) must divide model.d_model (100)"),
        (dict(n_heads=8, n_kv_heads=3), "n_kv_heads (3) must divide model.n_heads (8)"),
        (dict(positions={"kind": "alibi"}), "model.positions.kind must be one of sinusoidal, learned, relative, rope"),
        (dict(dropout=1.5), "model.dropout must be in [0, 1)"),
        (dict(d_model=0), "model.d_model must be a positive integer"),
    ],
)
def test_bad_values_raise_one_sentence_naming_the_key(values, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ModelConfig(**values)


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="unknown model key 'd_modle'"):
        ModelConfig.from_dict({"d_modle": 3})


def test_unknown_preset_suggests_the_closest_name_in_one_short_sentence():
    with pytest.raises(ConfigError, match=r"unknown model preset 'rot5-mnii'; did you mean rot5-mini\?"):
        preset("rot5-mnii")
    with pytest.raises(ConfigError, match=r"'gpt-7'; \d+ are presets, none close to it") as refused:
        preset("gpt-7")
    assert len(str(refused.value)) < 120


def test_every_family_has_tiny_small_and_base_and_rot5_has_mini():
    names = set(preset_names())
    for family in ("transformer", "t5", "t5-v1.1", "rot5"):
        assert {f"{family}-tiny", f"{family}-small", f"{family}-base"} <= names
    assert "rot5-mini" in names


def test_config_round_trips_through_a_dict():
    cfg = preset("rot5-small", n_experts=8)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "family, init",
    [("encoder_decoder", "t5"), ("decoder_only", "normal"), ("ar_encdec", "normal"), ("rnn_seq2seq", "normal")],
)
def test_the_default_initialisation_follows_the_family(family, init):
    """A causal LM without a preset starts from nanoGPT's N(0, 0.02), not T5's scheme (loss ~ln V at step 1)."""
    assert ModelConfig(family=family).init == init
    assert ModelConfig(family=family, init="t5").init == "t5"  # an explicit choice stands


def test_a_decoder_only_model_without_a_preset_starts_near_ln_v():
    import math

    import torch

    from encdec.models import build_model

    torch.manual_seed(0)
    cfg = ModelConfig.from_dict(
        dict(
            family="decoder_only",
            vocab_size=512,
            d_model=64,
            n_heads=4,
            d_ff=128,
            n_encoder_layers=2,
            position="learned",
            norm="layernorm",
            activation="gelu",
            max_positions=32,
            dropout=0.0,
        )
    )
    ids = torch.randint(0, 512, (4, 32))
    loss = build_model(cfg)(None, ids[:, :-1], labels=ids[:, 1:]).loss
    assert abs(loss.item() - math.log(512)) < 0.5
