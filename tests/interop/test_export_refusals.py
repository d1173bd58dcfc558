"""Every family's export refusal, however much of a layout a model lacks, is one whole sentence: the start,
as many whole requirements as fit, the rest counted, what exports instead and how to load the model."""

import re

import pytest

import encdec
from encdec.cli import one_line
from encdec.errors import MAX_SENTENCE, ConfigError, Unmet
from encdec.interop.families import FAMILIES
from encdec.interop.to_hf import LOAD_HINT, hf_layout

# much of every layout wrong at once: long lists of unmet requirements
WRONG = dict(
    norm="layernorm",
    activation="swiglu",
    bias=True,
    scale_attention=False,
    scale_embeddings=True,
    scale_output=True,
    embedding_norm=True,
    final_logits_bias=True,
    qk_norm=True,
    n_kv_heads=2,
)
SHAPES = {
    "as it is": {},
    "rope": {"position": "rope", "rope_cross": "none"},
    "learned": {"position": "learned"},
    "sinusoidal pre-norm": {"position": "sinusoidal", "norm_position": "pre"},
    "experts": {"n_experts": 4, "moe_top_k": 2},
}
PRESETS = ("t5-tiny", "rot5-tiny", "transformer-tiny", "decoder_only-tiny")
ADAPTED_QWEN3 = dict(  # a Qwen3 adapted into an encoder-decoder (training.adaptation)
    position="rope", rope_cross="none", norm="rmsnorm", activation="swiglu", shared_embeddings=False, qk_norm=True
)


def wrong_configs():
    for preset in PRESETS:
        for shape, overrides in SHAPES.items():
            yield f"{preset} {shape}", encdec.preset(preset, vocab_size=300, **WRONG, **overrides)
    yield "adapted qwen3", encdec.preset("t5-tiny", vocab_size=300, **ADAPTED_QWEN3)


def check_whole(error: ConfigError) -> None:
    said = str(error)
    assert len(said) <= MAX_SENTENCE and one_line(f"encdec: error: {said}") == f"encdec: error: {said}", said
    if isinstance(error, Unmet):  # the first requirements whole, in order; the others counted
        shown = [clause for clause in error.unmet if clause in said]
        assert shown == error.unmet[: len(shown)] and shown, said
        more = re.search(r"; and (\d+) more", said)
        assert (int(more.group(1)) if more else 0) == len(error.unmet) - len(shown), said


@pytest.mark.parametrize("name, cfg", list(wrong_configs()), ids=[name for name, _ in wrong_configs()])
def test_an_export_refusal_is_whole_and_ends_with_how_to_load_the_model(name, cfg):
    with pytest.raises(ConfigError) as raised:
        hf_layout(cfg)
    check_whole(raised.value)
    assert str(raised.value).endswith(LOAD_HINT)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_s_check_says_whole_requirements(family):
    refused = 0
    for _, cfg in wrong_configs():
        try:
            FAMILIES[family].check(cfg)
        except ConfigError as error:
            check_whole(error)
            refused += 1
    assert refused


def test_an_adapted_qwen3_keeps_the_reasons_t5gemma_needs():
    with pytest.raises(Unmet) as raised:
        hf_layout(encdec.preset("t5-tiny", vocab_size=300, **ADAPTED_QWEN3))
    said = str(raised.value)
    assert said.startswith("an encoder-decoder with RoPE has no Hugging Face counterpart but T5Gemma, whose layout")
    assert "(norms.kind must be gemma_rmsnorm with norms.post; activation must be gated_gelu; " in said
    assert re.search(r"; and \d+ more\); encdec.from_pretrained\(RUN_DIR\) loads it$", said), said
