"""LongT5 checkpoints, local and transient-global (random weights from transformers' configs, saved with
save_pretrained: no download), load exactly and go through encdec's paths: logits within 1e-4 of transformers on
a padded batch whose rows end inside, at and before a global block and a local window, greedy and beam-4 tokens
identical, an export transformers reloads with the same logits, `encdec generate` / `export` on the directory, a
server's rows equal to generate alone, LoRA with peft's names, a run fine-tuned from the checkpoint, `encdec
size` of the published config, and what LongT5 cannot express refused in one sentence."""

import json
from pathlib import Path

import pytest
import torch

import encdec
from encdec.cli import main
from encdec.errors import ConfigError
from encdec.interop import export_hf
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.modules.transient_global import transient_globals
from encdec.tokenizers import build_tokenizer
from tests.interop.command_line_kit import assert_generate_and_export_on_the_command_line, fine_tuned_and_exported
from tests.interop.parity_kit import logit_gap as batch_gap
from tests.interop.parity_kit import padded_rows
from tests.interop.parity_kit import t5_batch as padded_batch
from tests.interop.parity_kit import t5_gap as logit_gap
from tests.interop.serving_kit import assert_served_equals_generate_alone

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=384, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0)
KINDS = {"local": "local", "transient-global": "transient_global"}
SCALES = ["scaled", "unscaled"]  # tie_word_embeddings true (T5 v1.0's output scaling) or false (v1.1's, released)
TEXTS = ["a story of many words about the sea", "short", "the third input, of middling length"]


def hf_model(kind: str, scale: str = "unscaled"):
    """A random-weight LongT5 with a 3-token radius and 4-token blocks, its norms random too (they start at 1)."""
    torch.manual_seed(0)
    config = transformers.LongT5Config(
        **SHAPE,
        encoder_attention_type=kind,
        local_radius=3,
        global_block_size=4,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=scale == "scaled",
    )
    model = transformers.LongT5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model


def saved(kind: str, path: Path, scale: str = "unscaled"):
    reference = hf_model(kind, scale)
    reference.save_pretrained(path)
    convert_tokenizer(build_tokenizer("byte")).save(path)
    return reference


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_transformers_on_a_padded_batch(kind, scale, tmp_path):
    reference = saved(kind, tmp_path, scale)
    ours = encdec.load_hf(tmp_path)
    assert (ours.config.attention.encoder, ours.config.attention.local_radius) == (KINDS[kind], 3)
    assert ours.config.output.scale == (scale == "scaled") and ours.config.embeddings.tie
    assert logit_gap(reference, ours) < 1e-4


@pytest.mark.parametrize("kind", KINDS)
def test_a_long_batch_attended_by_blocks_equals_transformers(kind, tmp_path, monkeypatch):
    """Sources of 150 tokens and fewer (rows ending inside a block and a window) are long for a radius of 3: the
    encoder attends by blocks of 4 (modules.blocked_band, which the test sees called), and the logits are
    transformers' within 1e-4."""
    from encdec.modules import blocked_band

    reference = saved(kind, tmp_path)
    ours = encdec.load_hf(tmp_path)
    groups = []
    real_group = blocked_band._group
    monkeypatch.setattr(blocked_band, "_group", lambda *args, **kwargs: groups.append(1) or real_group(*args, **kwargs))
    assert batch_gap(reference, ours, padded_rows(384, (150, 97, 61), 150, 12)) < 1e-4
    assert len(groups) == 2  # both layers, by blocks


@pytest.mark.parametrize("kind", KINDS)
def test_the_encoder_attention_matters_to_the_logits(kind, tmp_path):
    """Read as a plain T5 (every key seen, no global keys) the same weights compute other logits: the parity
    above holds because the local window and the global keys are there."""
    reference = saved(kind, tmp_path)
    ours = encdec.load_hf(tmp_path)
    full = encdec.build_model(
        ours.config.updated(attention={"encoder": "full", "local_radius": 127, "global_block_size": 16})
    ).eval()
    full.load_state_dict({k: v for k, v in ours.state_dict().items() if k in full.state_dict()})
    assert logit_gap(reference, full) > 1e-2


def test_the_global_blocks_are_transformers_own():
    from transformers.models.longt5.modeling_longt5 import _make_global_fixed_block_ids

    _, mask, _ = padded_batch()
    for size in (1, 2, 4, 5, 24, 30):
        blocks, real = _make_global_fixed_block_ids(mask, size)
        ours = transient_globals(mask.bool(), size)
        assert torch.equal(ours.blocks, blocks.long()) and torch.equal(ours.real, real.bool())


@pytest.mark.parametrize("options", [{}, {"num_beams": 4}], ids=["greedy", "beam 4"])
@pytest.mark.parametrize("kind", KINDS)
def test_generated_tokens_equal_transformers(kind, options, tmp_path):
    reference = saved(kind, tmp_path)
    ours = encdec.load_hf(tmp_path)
    src, mask, _ = padded_batch()
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=12, **options)
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=12, **options), expected)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("kind", KINDS)
def test_an_export_reloads_in_transformers_with_the_same_logits(kind, scale, tmp_path):
    saved(kind, tmp_path / "in", scale)
    ours = encdec.load_hf(tmp_path / "in")
    assert export_hf(ours, encdec.load_tokenizer(tmp_path / "in"), tmp_path / "out") == "LongT5ForConditionalGeneration"
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert type(reloaded).__name__ == "LongT5ForConditionalGeneration"
    assert reloaded.config.encoder_attention_type == kind
    assert logit_gap(reloaded, ours) < 1e-4
    again = encdec.load_hf(tmp_path / "out")
    assert again.config == ours.config
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def test_generate_and_export_on_the_command_line(tmp_path, capsys):
    reference = saved("transient-global", tmp_path / "in")
    assert_generate_and_export_on_the_command_line(
        reference, tmp_path, capsys, TEXTS, "LongT5ForConditionalGeneration", logit_gap
    )


def test_a_server_batch_of_transient_global_rows_equals_generate_alone(tmp_path):
    saved("transient-global", tmp_path)
    model = encdec.load_hf(tmp_path)
    assert_served_equals_generate_alone(
        model,
        (3, 384),
        [(3, {"max_new_tokens": 4}), (21, {"max_new_tokens": 12}), (9, {"max_new_tokens": 9, "num_beams": 4})],
    )


def test_lora_with_peft_s_names_exports_an_adapter_peft_loads_with_equal_logits(tmp_path):
    from peft import PeftModel

    from encdec.interop.peft_adapter import save_peft_adapter
    from encdec.models.lora import add_lora, lora_layers

    saved("transient-global", tmp_path / "base")
    ours = encdec.load_hf(tmp_path / "base")
    adapted = add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q", "v", "wo"])
    assert len(adapted) == 2 * 6 + 4  # q and v of the 6 attentions (2 encoder, 2 x 2 decoder), wo of 4 blocks
    torch.manual_seed(2)
    for layer in lora_layers(ours).values():
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
    save_peft_adapter(ours, tmp_path / "adapter", str(tmp_path / "base"))
    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base")
    assert logit_gap(PeftModel.from_pretrained(base, tmp_path / "adapter").eval(), ours.eval()) < 1e-4


def test_a_run_fine_tuned_from_the_checkpoint_keeps_its_attention_and_exports_as_longt5(tmp_path, shared_data, capsys):
    saved("transient-global", tmp_path / "base")
    described, printed, reloaded = fine_tuned_and_exported(tmp_path / "base", tmp_path, shared_data, capsys, 40)
    assert (described["attention"]["encoder"], described["attention"]["global_block_size"]) == ("transient_global", 4)
    assert "LongT5ForConditionalGeneration" in printed
    assert logit_gap(reloaded, encdec.from_pretrained(tmp_path / "run")) < 1e-4


LONG_T5_TGLOBAL_BASE = {  # google/long-t5-tglobal-base's published config.json, the keys transformers reads
    "architectures": ["LongT5ForConditionalGeneration"],
    "d_ff": 2048,
    "d_kv": 64,
    "d_model": 768,
    "decoder_start_token_id": 0,
    "dropout_rate": 0.1,
    "encoder_attention_type": "transient-global",
    "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu",
    "global_block_size": 16,
    "is_encoder_decoder": True,
    "layer_norm_epsilon": 1e-06,
    "local_radius": 127,
    "model_type": "longt5",
    "num_decoder_layers": 12,
    "num_heads": 12,
    "num_layers": 12,
    "pad_token_id": 0,
    "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32,
    "tie_word_embeddings": False,
    "vocab_size": 32128,
}


def test_encdec_size_of_the_published_config_json_is_transformers_parameter_count(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(LONG_T5_TGLOBAL_BASE))
    assert main(["size", str(tmp_path / "config.json")]) == 0
    keys = {k: v for k, v in LONG_T5_TGLOBAL_BASE.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        built = transformers.LongT5ForConditionalGeneration(transformers.LongT5Config(**keys))
    expected = sum(p.numel() for p in built.parameters())
    assert f"parameters:                    {expected:,}\n" in capsys.readouterr().out


def test_what_longt5_cannot_express_is_one_sentence(tmp_path):
    tokenizer = build_tokenizer("byte")
    untied = encdec.build_model(
        encdec.preset("t5-tiny", vocab_size=400, encoder_attention="local", tie_embeddings=False, scale_output=False)
    )
    with pytest.raises(ConfigError, match="cannot be saved as Hugging Face LongT5: transformers ties its head"):
        export_hf(untied, tokenizer, tmp_path / "untied")
    rope = encdec.build_model(encdec.preset("rot5-tiny", encoder_attention="local"))
    with pytest.raises(ConfigError, match="cannot be saved as Hugging Face LongT5: positions.kind must be relative"):
        export_hf(rope, tokenizer, tmp_path / "rope")
    assert not (tmp_path / "untied").exists() and not (tmp_path / "rope").exists()
    with pytest.raises(
        ConfigError, match="^model.attention.encoder transient_global needs model.positions.kind relative"
    ):
        encdec.build_model(encdec.preset("rot5-tiny", encoder_attention="transient_global"))
    with pytest.raises(
        ConfigError, match="^model.attention.local_radius acts only with model.attention.encoder local or"
    ):
        encdec.build_model(encdec.preset("t5-tiny", local_radius=8))
    with pytest.raises(
        ConfigError, match="^model.attention.global_block_size acts only with model.attention.encoder local or"
    ):
        encdec.build_model(encdec.preset("t5-tiny", encoder_attention="local", global_block_size=8))
    with pytest.raises(ConfigError, match="^model.attention.encoder is not used by the decoder_only family"):
        encdec.build_model(encdec.preset("decoder_only-tiny", encoder_attention="local"))


def test_attention_maps_show_the_window_and_the_block_keys(tmp_path, capsys):
    import numpy as np

    saved("transient-global", tmp_path / "in")
    source = "a dog runs along the beach"  # 26 tokens: 6 blocks of 4
    args = ["attention", str(tmp_path / "in"), "--source", source, "-o", str(tmp_path / "enc.png"), "--encoder"]
    assert main([*args, "--npz", str(tmp_path / "enc.npz")]) == 0
    assert "26 source x 26 source tokens and 6 block keys" in capsys.readouterr().out
    probs = np.load(tmp_path / "enc.npz")["encoder"]  # (layers, heads, 26, 26 + 6)
    assert probs.shape == (2, 4, 26, 32) and np.allclose(probs.sum(-1), 1.0, atol=1e-5)
    distance = np.abs(np.arange(26)[:, None] - np.arange(26)[None, :])
    assert (probs[..., :26][..., distance > 3] == 0).all() and (probs[..., 26:] > 0).all()
