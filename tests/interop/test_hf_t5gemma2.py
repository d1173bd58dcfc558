"""T5Gemma 2 (model_type t5gemma2), text alone: a random-weight checkpoint (saved with save_pretrained: no
download) with each head's queries and keys normed, the decoder's self- and cross-attention merged, a split
window narrower than the test's sequences, RoPE of one base in the sliding layers and another, linearly scaled,
in the global ones, and an end-of-image token with a vector of its own loads exactly: logits within 1e-4 of
transformers on a padded batch, greedy and beam-4 tokens identical, the compiled step and a server's rows equal
generate alone, an export transformers reloads with the same logits, `encdec generate` / `export` on the
directory, LoRA with peft's names, attention maps of the merged attention, `encdec size`; an input holding the
image token is one sentence."""

import json

import pytest
import torch
from gemma_kit import TEXTS, VOCAB, tokenizer_json

import encdec
from encdec.cli import main
from encdec.errors import CheckpointError, DataError
from encdec.interop import export_hf
from encdec.interop.from_hf import hf_model_config
from encdec.tokenizers.pretrained import PretrainedTokenizer
from tests.interop import parity_kit
from tests.interop.serving_kit import assert_served_equals_generate_alone, mixed

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

EOI, IMAGE = 5, 7  # the end-of-image and image tokens, inside the tiny vocabulary
ROPE = {  # Gemma 3's: the global layers' base scaled linearly, the sliding layers' own
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
}


def stack(layers: int) -> dict:
    """4 query heads over 2 key/value heads, a window of 4 in every layer but the second of each pair."""
    return dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=40,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=12,
        sliding_window=4,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
        rope_parameters=ROPE,
    )


def hf_model():
    """A random-weight T5Gemma2ForConditionalGeneration with a tiny vision tower, its norms and end-of-image
    vector random too (they start at 0)."""
    torch.manual_seed(0)
    vision = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
    )
    specials = dict(eoi_token_index=EOI, image_token_index=IMAGE)
    encoder = dict(text_config=stack(4), vision_config=vision, mm_tokens_per_image=4, **specials)
    config = transformers.T5Gemma2Config(encoder=encoder, decoder=stack(2), **specials)
    model = transformers.T5Gemma2ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or "eoi" in name:
                param.normal_(0, 0.5)
    return model


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    path = tmp_path_factory.mktemp("t5gemma2")
    reference = hf_model()
    reference.save_pretrained(path)
    tokenizer_json(path)  # and the tokenizer class a released checkpoint's tokenizer_config.json names
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GemmaTokenizer"}))
    return reference, encdec.load_hf(path), path


def padded_batch():
    """(3, 12) ids with rows of 12 (one the end-of-image token), 7 and 3 real tokens, their mask, and (3, 9)
    decoder inputs from the decoder start."""
    src, mask, tgt = parity_kit.padded_rows(VOCAB, (12, 7, 3), 12, 9, low=8, start=2)
    src[0, 4] = EOI
    return src, mask, tgt


def logit_gap(reference, ours, left: bool = False) -> float:
    return parity_kit.logit_gap(reference, ours, padded_batch(), left)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_logits_equal_transformers_on_a_padded_batch(pair, left):
    reference, ours, path = pair
    assert logit_gap(reference, ours, left) < 1e-4
    cfg = ours.config
    assert (cfg.attention.qk_norm, cfg.cross_attention.merged, cfg.attention.sliding_window_layout) == (
        True,
        True,
        "split",
    )
    assert (
        cfg.positions.rope_theta,
        cfg.positions.rope_scale,
        cfg.positions.rope_local_theta,
        cfg.attention.global_every,
    ) == (
        1e6,
        8.0,
        1e4,
        2,
    )
    assert (cfg.image_tokens.eoi_token_id, cfg.image_tokens.image_token_id) == (EOI, IMAGE)
    assert (cfg.embeddings.shared, cfg.embeddings.tie) == (True, True)
    assert hf_model_config(path) == cfg  # config.json alone (encdec size) reads the same model


def test_every_gemma_3_setting_changes_the_logits(pair):
    """Each setting T5Gemma 2 adds acts in the test above: read without it, the same weights move the logits."""
    reference, ours, _ = pair
    for change in (
        {"sliding_window_layout": "each_side"},
        {"rope_scale": 1.0},
        {"rope_local_theta": None},
        {"image_tokens": {"eoi_token_id": None}},
    ):
        other = encdec.build_model(ours.config.updated(**change)).eval()
        other.load_state_dict(ours.state_dict(), strict=False)
        assert logit_gap(reference, other) > 1e-3, change


@pytest.mark.parametrize("options", [{}, {"num_beams": 4}], ids=["greedy", "beam 4"])
def test_generated_tokens_equal_transformers(pair, options):
    reference, ours, _ = pair
    src, mask, _ = padded_batch()
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=12, do_sample=False, **options)
    assert expected.shape[1] > 5  # past the window of 4
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=12, **options), expected)
    compiled = encdec.generate(ours, src, mask, max_new_tokens=12, compile=True, **options)
    assert torch.equal(compiled, expected)


def test_a_server_batch_of_rows_each_at_its_own_position_equals_generate_alone(pair):
    _, ours, _ = pair
    assert_served_equals_generate_alone(ours, (8, VOCAB), mixed(12))


def test_an_export_reloads_in_transformers_with_the_same_logits(pair, tmp_path):
    reference, ours, path = pair
    name = export_hf(ours, PretrainedTokenizer.from_directory(path), tmp_path / "out")
    assert name == "T5Gemma2ForConditionalGeneration"
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out")
    assert type(reloaded).__name__ == name
    assert logit_gap(reloaded.eval(), ours) < 1e-4
    again = encdec.load_hf(tmp_path / "out")
    assert again.config == ours.config
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def test_generate_and_export_on_the_command_line(pair, tmp_path, capsys):
    reference, _, path = pair
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(TEXTS) + "\n")
    args = ["generate", str(path), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "6"]
    assert main(args) == 0
    outputs = [json.loads(line)["output"] for line in capsys.readouterr().out.splitlines()]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    encoded = hf_tokenizer(TEXTS, return_tensors="pt", padding=True)
    expected = reference.generate(**encoded, max_new_tokens=6, do_sample=False)
    assert outputs == [text.strip() for text in hf_tokenizer.batch_decode(expected[:, 1:], skip_special_tokens=True)]
    assert main(["export", str(path), "--out", str(tmp_path / "out")]) == 0
    assert "T5Gemma2ForConditionalGeneration" in capsys.readouterr().out
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert logit_gap(reloaded, encdec.load_hf(path)) < 1e-4


def test_lora_with_peft_s_names_exports_an_adapter_peft_loads_with_equal_logits(pair, tmp_path):
    from peft import PeftModel

    from encdec.interop.peft_adapter import hf_module_names, save_peft_adapter
    from encdec.models.lora import add_lora, lora_layers

    _, _, path = pair
    ours = encdec.load_hf(path)
    targets = ["q_proj", "v_proj", "down_proj"]  # peft's names for the family's layers
    adapted = add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets, aliases=hf_module_names(ours))
    assert len(adapted) == 2 * 6 + 6  # q and v of the 6 attentions (4 encoder, 2 merged), down of 6 blocks
    torch.manual_seed(2)
    for layer in lora_layers(ours).values():
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
    save_peft_adapter(ours, tmp_path / "adapter", str(path))
    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(path)
    assert logit_gap(PeftModel.from_pretrained(base, tmp_path / "adapter").eval(), ours.eval()) < 1e-4


def test_the_attention_maps_of_the_merged_attention_are_its_source_columns(pair, tmp_path):
    """What `encdec attention` draws for a merged decoder layer: the share of each query's one softmax that goes
    to each source token, as transformers' cross_attentions output gives it."""
    from encdec.inspection.record import record_attention

    _, ours, path = pair
    reference = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager").eval()
    src, mask, tgt = padded_batch()
    record = record_attention(ours, src[:1], torch.cat([tgt[:1, 1:], tgt[:1, :1]], 1), mask[:1])
    with torch.no_grad():
        out = reference(input_ids=src[:1], attention_mask=mask[:1], decoder_input_ids=tgt[:1], output_attentions=True)
    expected = torch.stack(out.cross_attentions, dim=1)  # (1, L, H, T, S)
    assert torch.allclose(record.cross, expected, atol=1e-5)
    assert (record.cross.sum(-1) < 1).all()  # the rest of each row went to the target's own keys


def test_an_input_holding_the_image_token_is_one_sentence(pair, tmp_path, capsys):
    _, ours, path = pair
    src, mask, _ = padded_batch()
    src[1, 2] = IMAGE
    with pytest.raises(DataError, match=f"holds the image token \\(id {IMAGE}\\); encdec reads this model's text"):
        encdec.generate(ours, src, mask, max_new_tokens=3)
    image = PretrainedTokenizer.from_directory(path).decode([IMAGE])  # what a user would type for it
    (tmp_path / "in.txt").write_text(f"a cat {image}\n")
    assert main(["generate", str(path), "-i", str(tmp_path / "in.txt")]) != 0
    assert "holds the image token" in capsys.readouterr().err


def test_encdec_size_counts_the_text_model_as_transformers_does(tmp_path, capsys):
    """t5gemma-2-270m-270m's text stacks (transformers' defaults for the rest): the vision tower, which encdec
    does not read, is left out of both counts."""
    text = dict(
        vocab_size=262144,
        hidden_size=640,
        intermediate_size=2048,
        num_hidden_layers=18,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=512,
    )
    config = transformers.T5Gemma2Config(encoder=dict(text_config=text), decoder=text)
    (tmp_path / "config.json").write_text(config.to_json_string())
    assert main(["size", str(tmp_path / "config.json")]) == 0
    with torch.device("meta"):
        built = transformers.T5Gemma2ForConditionalGeneration(config)
    text_only = sum(p.numel() for n, p in built.named_parameters() if "vision" not in n and "projector" not in n)
    assert f"parameters:                    {text_only:,}\n" in capsys.readouterr().out


def test_what_encdec_cannot_read_is_one_sentence(tmp_path):
    reference = hf_model()
    reference.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["decoder"]["rope_parameters"] = {**ROPE, "full_attention": {"rope_type": "yarn", "factor": 8.0}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="decoder full_attention RoPE is of type 'yarn'; encdec reads default"):
        encdec.load_hf(tmp_path)
    config["decoder"]["rope_parameters"] = ROPE
    config["decoder"]["query_pre_attn_scalar"] = 16
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="encoder and decoder differ in query_pre_attn_scalar"):
        encdec.load_hf(tmp_path)
