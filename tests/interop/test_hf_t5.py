"""Our T5 equals Hugging Face's on the same weights (random weights from configs)."""

import json

import pytest
import torch

import encdec
from encdec.errors import CheckpointError, ConfigError

transformers = pytest.importorskip("transformers")

SHAPES = {  # vocab, d_model, d_kv, d_ff, enc layers, dec layers, heads, buckets, max distance
    "hf-test-config": dict(vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4),
    "unequal-depth-odd-heads": dict(
        vocab_size=120,
        d_model=40,
        d_kv=7,
        d_ff=64,
        num_layers=3,
        num_decoder_layers=1,
        num_heads=5,
        relative_attention_num_buckets=16,
        relative_attention_max_distance=24,
    ),
    "wide-heads": dict(
        vocab_size=64,
        d_model=24,
        d_kv=16,
        d_ff=48,
        num_layers=1,
        num_decoder_layers=3,
        num_heads=3,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=12,
    ),
}
LAYOUTS = {"v1.0": dict(feed_forward_proj="relu"), "v1.1": dict(feed_forward_proj="gated-gelu")}


def hf_t5(shape: str, layout: str, untie: bool = False):
    config = transformers.T5Config(**SHAPES[shape], **LAYOUTS[layout], decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    if untie:  # the v1.1 / Flan-T5 layout: a head of its own, no output scaling
        model.config.scale_decoder_outputs = False
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * 0.05)
    return model


def save_untied(model, path):
    """Write the v1.1 layout as real Flan-T5 checkpoints have it: lm_head.weight and tie_word_embeddings false."""
    from safetensors.torch import save_file

    state = {k: v.clone().contiguous() for k, v in model.state_dict().items() if "embed_tokens" not in k}
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    config = model.config.to_dict()
    config["tie_word_embeddings"] = False
    config.pop("scale_decoder_outputs", None)
    (path / "config.json").write_text(json.dumps(config))


def padded_batch(vocab: int):
    src = torch.randint(2, vocab, (4, 40))
    mask = torch.ones(4, 40, dtype=torch.long)
    mask[1, 25:] = 0
    mask[2, 3:] = 0
    mask[3, 39:] = 0
    tgt = torch.randint(2, vocab, (4, 30))
    return src, mask, tgt


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_logits_equal_hugging_face_on_padded_batches(tmp_path, shape, layout):
    reference = hf_t5(shape, layout, untie=layout == "v1.1")
    if layout == "v1.1":
        save_untied(reference, tmp_path)
    else:
        reference.save_pretrained(tmp_path)
    ours = encdec.load_hf(tmp_path)
    src, mask, tgt = padded_batch(reference.config.vocab_size)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=mask.bool()).logits
    assert (got - expected).abs().max().item() < 1e-4
    assert ours.config.embeddings.tie == (layout == "v1.0")


def test_loss_equals_hugging_face_with_ignored_labels(tmp_path):
    reference = hf_t5("hf-test-config", "v1.0")
    reference.save_pretrained(tmp_path)
    ours = encdec.load_hf(tmp_path)
    src, mask, tgt = padded_batch(99)
    labels = tgt.clone()
    labels[0, 20:] = -100
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, labels=labels).loss
        decoder_input = reference._shift_right(labels)
        got = ours(src, decoder_input, src_mask=mask.bool(), labels=labels).loss
    assert abs(got.item() - expected.item()) < 1e-5


@pytest.mark.parametrize("preset", ["t5-tiny", "t5-v1.1-tiny"])
def test_save_hf_then_hugging_face_load_round_trips_exactly(tmp_path, preset):
    ours = encdec.build_model(encdec.preset(preset, vocab_size=77)).eval()
    encdec.save_hf(ours, tmp_path)
    reference = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    ours_state = ours.state_dict()
    from encdec.interop.t5.t5_layout import NAMES

    for name, tensor in ours_state.items():
        assert torch.equal(reference.state_dict()[NAMES.hf(name)], tensor), name
    if not ours.config.embeddings.tie:
        assert torch.equal(reference.lm_head.weight, ours.lm_head.weight)
    src, mask, tgt = padded_batch(77)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=mask.bool()).logits
    assert (got - expected).abs().max().item() < 1e-4
    again = encdec.load_hf(tmp_path)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours_state.items())


def test_pytorch_bin_weights_load_without_unpickling_code(tmp_path):
    reference = hf_t5("hf-test-config", "v1.0")
    _save_bin(reference, tmp_path)  # transformers 5 writes safetensors only: write the legacy file by hand
    ours = encdec.load_hf(tmp_path)
    src, mask, tgt = padded_batch(99)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert (ours(src, tgt, src_mask=mask.bool()).logits - expected).abs().max().item() < 1e-4


def _save_bin(model, path):
    torch.save(dict(model.state_dict()), path / "pytorch_model.bin")
    (path / "config.json").write_text(json.dumps(model.config.to_dict()))


def test_a_bin_file_carrying_a_pickled_object_is_refused(tmp_path):
    reference = hf_t5("hf-test-config", "v1.0")
    _save_bin(reference, tmp_path)
    torch.save({"payload": EvilPayload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pytorch_model.bin carries pickled objects other than tensors"):
        encdec.load_hf(tmp_path)


class EvilPayload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_a_folder_without_config_is_one_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="has no config.json"):
        encdec.load_hf(tmp_path)


def test_an_unsupported_model_type_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(CheckpointError, match="model_type 'gpt2' is not supported"):
        encdec.load_hf(tmp_path)


def test_missing_weights_are_named(tmp_path):
    reference = hf_t5("hf-test-config", "v1.0")
    reference.save_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    state = load_file(tmp_path / "model.safetensors")
    del state["decoder.final_layer_norm.weight"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="lacks the weight decoder.final_layer_norm.weight"):
        encdec.load_hf(tmp_path)


def test_saving_a_model_t5_cannot_express_says_why(tmp_path):
    model = encdec.build_model(encdec.preset("rot5-tiny", vocab_size=50))
    with pytest.raises(ConfigError, match="positions.kind must be relative; n_kv_heads must equal n_heads"):
        encdec.save_hf(model, tmp_path)
