"""Hugging Face's Llama, Qwen2 and Qwen3 read into encdec's decoder-only family: random-weight tiny checkpoints
(tied and untied heads, Qwen2's q, k and v biases, Qwen3's norms of each head's queries and keys with a head_dim
of its own, Llama's attention and feed-forward biases) give transformers' float32 logits, its greedy tokens on a
left-padded batch and its parameter count, and write back what transformers reloads with the same logits; what
encdec does not compute is refused in one sentence."""

import json

import pytest
import torch

import encdec
from encdec.interop.from_hf import hf_model_config
from encdec.models import count_parameters_of
from tests.interop import parity_kit

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

V, EOS, PAD = 128, 3, 0
SIZES = dict(
    vocab_size=V,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    eos_token_id=EOS,
)
CASES = {  # name -> (transformers' class prefix, config overrides)
    "llama": ("Llama", {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}),
    "llama-tied": ("Llama", {"tie_word_embeddings": True, "pad_token_id": PAD}),
    "llama-attention-bias": ("Llama", {"attention_bias": True}),
    "llama-all-biases": ("Llama", {"attention_bias": True, "mlp_bias": True}),
    "qwen2": ("Qwen2", {}),
    "qwen2-tied": ("Qwen2", {"tie_word_embeddings": True}),
    "qwen3": ("Qwen3", {"head_dim": 32}),  # not hidden_size / heads (16)
    "qwen3-tied-biased": ("Qwen3", {"head_dim": 8, "tie_word_embeddings": True, "attention_bias": True}),
}


def hf_model(name: str, path):
    """The tiny checkpoint `name` saved at `path` (safetensors), every weight moved off its initial value so that
    biases (zero) and norms (one) are read, not assumed."""
    prefix, overrides = CASES[name]
    torch.manual_seed(0)
    config = getattr(transformers, f"{prefix}Config")(**SIZES, **overrides)
    return parity_kit.saved_jittered(getattr(transformers, f"{prefix}ForCausalLM")(config).eval(), path, 0.2)


def until_eos(row: list[int]) -> list[int]:
    return parity_kit.until_eos(row, EOS)


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    return parity_kit.left_padded(V, PAD)


@pytest.mark.parametrize("name", CASES)
def test_logits_equal_transformers(name, tmp_path):
    theirs = hf_model(name, tmp_path)
    ours = encdec.load_hf(tmp_path)
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = (ours(None, ids).logits - theirs(input_ids=ids).logits).abs().max().item()
    assert difference < 1e-4
    assert ours.config.embeddings.tie == ("tied" in name)


@pytest.mark.parametrize("name", ["llama", "llama-tied", "qwen2", "qwen3"])
def test_greedy_tokens_equal_transformers_generate_on_a_left_padded_batch(name, tmp_path):
    theirs = hf_model(name, tmp_path)
    ours = encdec.load_hf(tmp_path)
    ids, mask = left_padded()
    expected = theirs.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=PAD, eos_token_id=EOS
    )[:, ids.shape[1] :]
    got = encdec.generate(ours, ids, mask, max_new_tokens=8)[:, 1:]  # row r: [decoder start, continuation ...]
    assert [until_eos(row) for row in got.tolist()] == [until_eos(row) for row in expected.tolist()]


@pytest.mark.parametrize("name", ["llama", "qwen2-tied", "qwen3"])
def test_size_counts_the_parameters_transformers_holds(name, tmp_path):
    theirs = hf_model(name, tmp_path)
    assert count_parameters_of(hf_model_config(tmp_path)).total == sum(p.numel() for p in theirs.parameters())


@pytest.mark.parametrize("name", ["llama", "llama-all-biases", "qwen2", "qwen3-tied-biased"])
def test_a_loaded_model_writes_back_what_transformers_reloads_with_the_same_logits(name, tmp_path):
    parity_kit.assert_written_back_equal(hf_model(name, tmp_path / "in"), tmp_path, V, 10)


REFUSED = {  # name -> (the checkpoint, config.json's changed keys, the sentence's telling part)
    "llama3-rope": (
        "llama",
        {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}},
        "rope_parameters is RoPE of type 'llama3', which encdec does not compute",
    ),
    "yarn-rope-scaling": (
        "qwen2",
        {"rope_parameters": None, "rope_theta": 10000.0, "rope_scaling": {"type": "yarn", "factor": 4.0}},
        "rope_scaling is RoPE of type 'yarn', which encdec does not compute",
    ),
    "sliding-window": (
        "qwen2",
        {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0, "layer_types": None},
        "turns on a sliding window of 4 tokens \\(use_sliding_window\\), which encdec's decoder-only family",
    ),
    "mlp-bias": ("llama", {"mlp_bias": True}, "mlp_bias is true and attention_bias false; encdec has no biases"),
    "gelu": ("qwen3", {"hidden_act": "gelu"}, "hidden_act is 'gelu'; encdec reads qwen3 with silu \\(SwiGLU\\) alone"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_encdec_does_not_compute_is_refused_in_one_sentence(name, tmp_path):
    checkpoint, changed, message = REFUSED[name]
    hf_model(checkpoint, tmp_path)
    parity_kit.assert_refused_in_one_sentence(tmp_path, changed, message)


def test_a_sliding_window_left_off_every_layer_is_read(tmp_path):
    """Qwen2's window acts from layer max_window_layers on: past the last layer it is never on."""
    hf_model("qwen2", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    layers = {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2, "layer_types": None}
    (tmp_path / "config.json").write_text(json.dumps(config | layers))
    assert hf_model_config(tmp_path).n_encoder_layers == 2


def test_a_list_of_eos_ids_stops_generation_at_any_of_them_as_transformers_does(tmp_path):
    """Llama 3's generation_config.json lists several EOS ids (<|end_of_text|>, <|eot_id|>, ...): generate stops
    at any of them, from the checkpoint's defaults, as transformers' generate does."""
    theirs = hf_model("llama", tmp_path)
    ids, mask = left_padded()
    free = theirs.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=PAD)
    stop = int(free[0, ids.shape[1] + 2])  # the third token row 0 writes, made an EOS as well
    eos = [EOS, stop]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "pad_token_id": PAD}))
    expected = theirs.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=PAD, eos_token_id=eos
    )[:, ids.shape[1] :]
    ours = encdec.load_hf(tmp_path)
    assert ours.generation_defaults["eos_token_id"] == eos and ours.config.eos_id == EOS
    got = encdec.generate(ours, ids, mask, max_new_tokens=8)[:, 1:]

    def until_any_eos(row: list[int]) -> list[int]:
        ends = [i for i, token in enumerate(row) if token in eos]
        return row[: ends[0] + 1] if ends else row

    assert [until_any_eos(row) for row in got.tolist()] == [until_any_eos(row) for row in expected.tolist()]
    first = got[0].tolist()
    stopped = len(until_any_eos(first))
    assert stopped <= 3 and set(first[stopped:]) <= {ours.config.pad_id}  # stopped there: padding, no more tokens
