"""Hugging Face's Gemma 2 and Gemma 3 (text) read into encdec's decoder-only family: random-weight tiny checkpoints
(tied and untied heads, caps on and off, Gemma 3's head norms, head_dim of its own and RoPE of two bases with the
global layers' scaled, layer_types of one global layer every n) give transformers' float32 logits on a sequence
longer than the sliding window, its greedy tokens and step scores on a left-padded batch whose prompt and output
outgrow the window, its parameter count, the keys of released files read as transformers reads them, and write back
what transformers reloads with the same logits; what encdec does not compute is refused in one sentence."""

import json

import pytest
import torch

import encdec
from encdec.errors import ConfigError
from encdec.interop.families import FAMILIES
from encdec.interop.from_hf import hf_model_config
from encdec.models import DecoderOnly, count_parameters_of
from tests.interop import parity_kit

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

V, EOS, PAD, WINDOW = 128, 3, 0, 4
SIZES = dict(
    vocab_size=V,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    query_pre_attn_scalar=24,  # not head_dim: the scores' own scale
    sliding_window=WINDOW,
    max_position_embeddings=64,
    eos_token_id=EOS,
    pad_token_id=PAD,
)
GEMMA3_ROPE = {  # the global layers' base scaled linearly, the sliding layers' of their own
    "full_attention": {"rope_type": "linear", "rope_theta": 1_000_000.0, "factor": 2.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
}
SLIDING_THEN_GLOBAL = ["sliding_attention", "sliding_attention", "full_attention"]  # one global layer every 3
CASES = {  # name -> (transformers' class prefix, config overrides)
    "gemma2": ("Gemma2", {}),  # every other layer sliding, both caps (Gemma 2's defaults)
    "gemma2-untied-no-caps": (
        "Gemma2",
        {"tie_word_embeddings": False, "final_logit_softcapping": None, "attn_logit_softcapping": None},
    ),
    "gemma2-every-third": ("Gemma2", {"layer_types": SLIDING_THEN_GLOBAL, "rope_parameters": {"rope_theta": 500.0}}),
    "gemma3": ("Gemma3Text", {"layer_types": SLIDING_THEN_GLOBAL, "rope_parameters": GEMMA3_ROPE, "head_dim": 32}),
    "gemma3-untied-capped": (
        "Gemma3Text",
        {"layer_types": SLIDING_THEN_GLOBAL, "tie_word_embeddings": False, "final_logit_softcapping": 20.0},
    ),
}
CLASSES = {"Gemma2": ("Gemma2Config", "Gemma2ForCausalLM"), "Gemma3Text": ("Gemma3TextConfig", "Gemma3ForCausalLM")}


def hf_model(name: str, path, **changed):
    """The tiny checkpoint `name` saved at `path` (safetensors), every weight moved off its initial value so that
    norms (zero: Gemma's scale 1 + w) are read, not assumed."""
    prefix, overrides = CASES[name]
    config_class, model_class = CLASSES[prefix]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**SIZES | overrides | changed)
    return parity_kit.saved_jittered(getattr(transformers, model_class)(config).eval(), path, 0.05)


def until_eos(row: list[int]) -> list[int]:
    return parity_kit.until_eos(row, EOS)


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    return parity_kit.left_padded(V, PAD)


@pytest.mark.parametrize("name", CASES)
def test_logits_equal_transformers_on_a_sequence_longer_than_the_window(name, tmp_path):
    theirs = hf_model(name, tmp_path)
    ours = encdec.load_hf(tmp_path)
    ids = torch.randint(0, V, (2, 14), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = ours(None, ids).logits
        difference = (logits - theirs(input_ids=ids).logits).abs().max().item()
        wide = DecoderOnly(ours.config.updated(sliding_window=ids.shape[1]))  # a window seeing all
        wide.load_state_dict(ours.state_dict())
        assert not torch.allclose(wide.eval()(None, ids).logits, logits)  # the window changes what is read
    assert difference < 1e-4
    assert ours.config.attention.sliding_window == WINDOW and ours.config.embeddings.tie == ("untied" not in name)


@pytest.mark.parametrize("name", ["gemma2", "gemma2-untied-no-caps", "gemma3"])
def test_greedy_tokens_and_scores_equal_transformers_generate_past_the_window_on_a_left_padded_batch(name, tmp_path):
    """Prompt (9 columns) and output (10 tokens) outgrow the window of 4: every cached step masks the keys it
    has left behind as transformers' sliding cache drops them."""
    theirs = hf_model(name, tmp_path)
    ours = encdec.load_hf(tmp_path)
    ids, mask = left_padded()
    options = dict(max_new_tokens=10, return_dict_in_generate=True, output_scores=True)
    expected = theirs.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, pad_token_id=PAD, eos_token_id=EOS, **options
    )
    got = encdec.generate(ours, ids, mask, **options)  # row r: [decoder start, continuation ...]
    assert [until_eos(row) for row in got.sequences[:, 1:].tolist()] == [
        until_eos(row) for row in expected.sequences[:, ids.shape[1] :].tolist()
    ]
    steps = min(len(got.scores), len(expected.scores))
    assert steps == 10 and torch.allclose(
        torch.stack(got.scores[:steps]), torch.stack(expected.scores[:steps]), atol=1e-4
    )


@pytest.mark.parametrize("name", ["gemma2", "gemma3-untied-capped"])
def test_size_counts_the_parameters_transformers_holds(name, tmp_path):
    theirs = hf_model(name, tmp_path)
    assert count_parameters_of(hf_model_config(tmp_path)).total == sum(p.numel() for p in theirs.parameters())


@pytest.mark.parametrize("name", ["gemma2", "gemma2-untied-no-caps", "gemma3", "gemma3-untied-capped"])
def test_a_loaded_model_writes_back_what_transformers_reloads_with_the_same_logits(name, tmp_path):
    parity_kit.assert_written_back_equal(hf_model(name, tmp_path / "in"), tmp_path, V, 12)


RELEASED = {  # name -> config.json's keys as the released checkpoints have them, in place of transformers 5's
    "gemma2": ({"rope_theta": 10000.0}, ("rope_parameters", "layer_types")),
    "gemma3": (
        {
            "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10_000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 2.0},
            "sliding_window_pattern": 3,
        },
        ("rope_parameters", "layer_types", "_sliding_window_pattern"),
    ),
}


@pytest.mark.parametrize("name", RELEASED)
def test_a_released_file_s_keys_are_read_as_transformers_reads_them(name, tmp_path):
    """Released Gemma 2 files hold rope_theta and no layer_types; Gemma 3's rope_local_base_freq, rope_scaling and
    sliding_window_pattern: encdec reads them as transformers does, to the same logits."""
    hf_model(name, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    released, dropped = RELEASED[name]
    config = {key: value for key, value in config.items() if key not in dropped} | released
    (tmp_path / "config.json").write_text(json.dumps(config))
    theirs = getattr(transformers, CLASSES[CASES[name][0]][1]).from_pretrained(tmp_path).eval()
    ours = encdec.load_hf(tmp_path)
    ids = torch.randint(0, V, (2, 14), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (ours(None, ids).logits - theirs(input_ids=ids).logits).abs().max().item() < 1e-4
    assert ours.config.attention.sliding_window == WINDOW and ours.config.attention.global_every == (
        2 if name == "gemma2" else 3
    )


REFUSED = {  # name -> (the checkpoint, config.json's changed keys, the sentence's telling part)
    "attention-bias": ("gemma2", {"attention_bias": True}, "attention_bias is true; encdec reads Gemma 2 without"),
    "bidirectional": (
        "gemma3",
        {"use_bidirectional_attention": True},
        "use_bidirectional_attention is true; encdec reads Gemma 3 as a causal language model",
    ),
    "gemma2-linear-rope": (
        "gemma2",
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
        "rope_parameters is RoPE of type 'linear', which encdec does not compute",
    ),
    "gemma3-yarn-rope": (
        "gemma3",
        {"rope_parameters": {**GEMMA3_ROPE, "full_attention": {"rope_type": "yarn", "factor": 4.0}}},
        "full_attention RoPE is of type 'yarn'; encdec reads default and linear there",
    ),
    "gemma3-scaled-sliding-rope": (
        "gemma3",
        {"rope_parameters": {**GEMMA3_ROPE, "sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
        "sliding_attention RoPE is of type 'linear'; encdec reads default there",
    ),
    "layer-types": (
        "gemma2",
        {"layer_types": ["full_attention", "sliding_attention", "sliding_attention"]},
        "layer_types are not one global layer every n with the others sliding",
    ),
    "activation": ("gemma3", {"hidden_activation": "relu"}, "hidden_activation is 'relu'; encdec reads Gemma 3 with"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_encdec_does_not_compute_is_refused_in_one_sentence(name, tmp_path):
    checkpoint, changed, message = REFUSED[name]
    hf_model(checkpoint, tmp_path)
    parity_kit.assert_refused_in_one_sentence(tmp_path, changed, message)


def test_a_layout_gemma_does_not_have_is_refused_on_export_in_one_sentence(tmp_path):
    hf_model("gemma3", tmp_path / "in")
    ours = encdec.load_hf(tmp_path / "in")
    capped = DecoderOnly(ours.config.updated(attention={"softcap": 50.0}))
    with pytest.raises(ConfigError, match="Gemma 3: attention.softcap must be unset") as error:
        FAMILIES["gemma3_text"].save(capped, tmp_path / "out")
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()
