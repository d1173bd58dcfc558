"""Blenderbot (model_type blenderbot, interop/blenderbot/): our model equals transformers' on the same tiny random
weights (logits on a padded batch, greedy and beam tokens), exports back to the same logits, is counted by
`encdec size` as transformers holds it, writes LoRA adapters peft loads under its names, and serves as it
generates."""

import pytest
import torch

import encdec
from encdec.interop import export_hf
from encdec.interop.from_hf import hf_model_config
from encdec.models.parameter_count import count_parameters_of
from encdec.tokenizers import build_tokenizer
from tests.interop import parity_kit
from tests.interop.serving_kit import assert_served_equals_generate_alone, mixed

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

VOCAB = 384


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random-weight Blenderbot, every weight moved off its initial value, saved as a Hugging Face directory."""
    path = tmp_path_factory.mktemp("blenderbot")
    torch.manual_seed(0)
    config = transformers.BlenderbotConfig(vocab_size=VOCAB, **parity_kit.BART_SHAPE)
    parity_kit.saved_jittered(transformers.BlenderbotForConditionalGeneration(config).eval(), path, 0.05)
    return path


@pytest.fixture(scope="module")
def pair(model_dir):
    """transformers' model read back from the directory, and ours read from it."""
    return transformers.AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), encdec.load_hf(model_dir)


def padded_batch():
    """(3, 12) ids with rows of 12, 7 and 3 real tokens, their mask, and (3, 9) decoder inputs from the start."""
    return parity_kit.padded_rows(VOCAB, (12, 7, 3), 12, 9, start=1)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_logits_equal_transformers_on_a_padded_batch(pair, left):
    reference, ours = pair
    assert parity_kit.logit_gap(reference, ours, padded_batch(), left) < 1e-4
    cfg = ours.config
    assert (cfg.position, cfg.position_offset, cfg.norm_position, cfg.embedding_norm) == ("learned", 0, "pre", False)
    assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id) == (0, 2, 1)


@pytest.mark.parametrize("options", [dict(), dict(num_beams=4, num_return_sequences=2)], ids=["greedy", "beam"])
def test_generated_tokens_equal_transformers_generate(pair, options):
    reference, ours = pair
    src, mask, _ = padded_batch()
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=8, **options)
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=8, **options), expected)


def test_an_export_reloads_in_transformers_with_the_same_logits(pair, tmp_path):
    ours = pair[1]
    assert export_hf(ours, build_tokenizer("byte"), tmp_path / "out") == "BlenderbotForConditionalGeneration"
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert type(reloaded).__name__ == "BlenderbotForConditionalGeneration"
    assert parity_kit.logit_gap(reloaded, ours, padded_batch()) < 1e-4
    assert encdec.load_hf(tmp_path / "out").config == ours.config


def test_size_counts_the_parameters_transformers_holds(pair, model_dir):
    reference = pair[0]
    assert count_parameters_of(hf_model_config(model_dir)).total == sum(p.numel() for p in reference.parameters())


def test_lora_with_peft_s_names_exports_an_adapter_peft_loads_with_equal_logits(model_dir, tmp_path):
    from peft import PeftModel

    from encdec.interop.peft_adapter import hf_module_names, save_peft_adapter
    from encdec.models.lora import add_lora, lora_layers

    ours = encdec.load_hf(model_dir)
    names = hf_module_names(ours)
    assert names["encoder.blocks.0.self_attn.q"] == "model.encoder.layers.0.self_attn.q_proj"
    assert names["decoder.blocks.2.cross_attn.o"] == "model.decoder.layers.2.encoder_attn.out_proj"
    assert len(add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q", "v", "wo"])) == 2 * 8 + 5
    torch.manual_seed(2)
    for layer in lora_layers(ours).values():
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
    targets = save_peft_adapter(ours, tmp_path / "adapter", str(model_dir))
    assert "model.decoder.layers.0.fc2" in targets
    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    assert parity_kit.logit_gap(adapted, ours.eval(), padded_batch()) < 1e-4


def test_a_server_batch_of_rows_each_at_its_own_position_equals_generate_alone(pair):
    assert_served_equals_generate_alone(pair[1], (3, VOCAB), mixed(12))
