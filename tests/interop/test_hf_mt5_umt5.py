"""mT5, UMT5 and ByT5 checkpoints (random weights from transformers' configs, saved with save_pretrained: no
download) load exactly and go through encdec's paths: logits within 1e-4 of transformers on a padded batch,
greedy and beam-4 tokens identical, an export transformers reloads as the same class with the same logits,
`encdec generate` and `encdec export` on the directory, LoRA with peft's names; ByT5's tokenizer gives
transformers' ByT5Tokenizer's ids. UMT5's bias in every layer also holds in a server's rows and a fixed-shape
step (tests/generation's families and here)."""

import json

import pytest
import torch

import encdec
from encdec.cli import main
from encdec.errors import CheckpointError, ConfigError
from encdec.interop import export_hf
from encdec.interop.from_hf import hf_model_config
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.tokenizers import build_tokenizer
from encdec.tokenizers.pretrained import PretrainedTokenizer
from tests.interop.command_line_kit import assert_generate_and_export_on_the_command_line, fine_tuned_and_exported
from tests.interop.parity_kit import t5_batch as padded_batch
from tests.interop.parity_kit import t5_gap as logit_gap
from tests.interop.serving_kit import assert_served_equals_generate_alone

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=384, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0)
FAMILIES = {  # name -> (config class, model class, overrides): ByT5 is T5 v1.1 over ByT5Tokenizer's 384 ids
    "mt5": ("MT5Config", "MT5ForConditionalGeneration", {}),
    "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", {}),
    "byt5": ("T5Config", "T5ForConditionalGeneration", {"feed_forward_proj": "gated-gelu"}),
}
HEADS = ["tied", "untied"]
TEXTS = ["Grüße aus Köln", "東京 🙂 naïve café", "hello"]


def hf_model(family: str, head: str):
    """A random-weight transformers model of `family`; "untied": a head of its own, tie_word_embeddings false
    (as the released mT5, UMT5 and ByT5 checkpoints are)."""
    config_class, model_class, overrides = FAMILIES[family]
    untied = {"tie_word_embeddings": False} if head == "untied" else {}
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**{**SHAPE, **overrides}, **untied)
    model = getattr(transformers, model_class)(config).eval()
    if head == "untied":
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * 0.05)
    return model


def saved(family: str, head: str, path):
    """The model of `family` saved into `path` with a tokenizer beside it, a complete directory: ByT5's, or for
    mT5 and UMT5 a tokenizer.json (encdec's byte tokenizer written for transformers, standing in for their
    SentencePiece vocabularies of 250,000 pieces)."""
    reference = hf_model(family, head)
    reference.save_pretrained(path)
    if family == "byt5":
        transformers.ByT5Tokenizer().save_pretrained(path)
    else:
        convert_tokenizer(build_tokenizer("byte")).save(path)
    return reference


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_transformers_on_a_padded_batch(family, head, tmp_path):
    reference = saved(family, head, tmp_path)
    ours = encdec.load_hf(tmp_path)
    assert logit_gap(reference, ours) < 1e-4
    assert ours.config.embeddings.tie == (head == "tied")
    assert ours.config.positions.relative_per_layer == (family == "umt5")
    if family == "umt5" or (family, head) == ("mt5", "tied"):  # config.json alone (encdec size): transformers
        assert hf_model_config(tmp_path) == ours.config  # writes an untied mT5's tie_word_embeddings true


def test_a_umt5_decoder_deeper_than_its_encoder_has_a_bias_in_each_of_its_layers(tmp_path):
    """A bias per layer of each stack; transformers' generate() cannot run this one (it sizes its cache by the
    encoder), its forward can."""
    FAMILIES["umt5-deep"] = ("UMT5Config", "UMT5ForConditionalGeneration", {"num_decoder_layers": 3})
    try:
        reference = saved("umt5-deep", "untied", tmp_path)
    finally:
        del FAMILIES["umt5-deep"]
    ours = encdec.load_hf(tmp_path)
    assert (len(ours.encoder.layer_biases), len(ours.decoder.layer_biases)) == (2, 3)
    assert logit_gap(reference, ours) < 1e-4


def test_mt5_is_not_scaled_as_a_tied_t5_is(tmp_path):
    """transformers' mT5 never scales its output: read as T5 (config.json's tie_word_embeddings true), its
    logits were d_model^0.5 times too small."""
    saved("mt5", "tied", tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["tie_word_embeddings"] is True
    cfg = encdec.load_hf(tmp_path).config
    assert (cfg.output.scale, cfg.hf_model_type) == (False, "mt5")


@pytest.mark.parametrize("options", [{}, {"num_beams": 4}], ids=["greedy", "beam 4"])
@pytest.mark.parametrize("family", FAMILIES)
def test_generated_tokens_equal_transformers(family, options, tmp_path):
    reference = saved(family, "untied", tmp_path)
    ours = encdec.load_hf(tmp_path)
    src, mask, _ = padded_batch()
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=12, **options)
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=12, **options), expected)


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("family", FAMILIES)
def test_an_export_reloads_in_transformers_as_the_same_class_with_the_same_logits(family, head, tmp_path):
    saved(family, head, tmp_path / "in")
    ours = encdec.load_hf(tmp_path / "in")
    name = export_hf(ours, encdec.load_tokenizer(tmp_path / "in"), tmp_path / "out")
    assert name == FAMILIES[family][1]
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert type(reloaded).__name__ == name
    assert logit_gap(reloaded, ours) < 1e-4
    again = encdec.load_hf(tmp_path / "out")
    assert again.config == ours.config
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_and_export_on_the_command_line(family, tmp_path, capsys):
    reference = saved(family, "untied", tmp_path / "in")
    tokenizer = assert_generate_and_export_on_the_command_line(
        reference, tmp_path, capsys, TEXTS, FAMILIES[family][1], logit_gap
    )
    exported = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert exported(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]


def test_byt5_s_tokenizer_gives_transformers_ids(tmp_path):
    transformers.ByT5Tokenizer().save_pretrained(tmp_path)
    ours = encdec.load_tokenizer(tmp_path)
    reference = transformers.ByT5Tokenizer()
    texts = [*TEXTS, "<extra_id_0> x <extra_id_124>", ""]
    assert ours.encode(texts) == reference(texts, add_special_tokens=False)["input_ids"]
    assert (ours.pad_id, ours.eos_id, ours.vocab_size) == (0, 1, 384)
    assert ours.specials.names["<unk>"] == 2 and len(ours.specials.sentinel_ids) == 125
    assert [ours.decode(ids) for ids in ours.encode(TEXTS)] == TEXTS
    assert isinstance(ours, PretrainedTokenizer)


@pytest.mark.parametrize("family", ["mt5", "umt5"])
def test_lora_with_peft_s_names_exports_an_adapter_peft_loads_with_equal_logits(family, tmp_path):
    from peft import PeftModel

    from encdec.interop.peft_adapter import save_peft_adapter
    from encdec.models.lora import add_lora, lora_layers

    saved(family, "untied", tmp_path / "base")
    ours = encdec.load_hf(tmp_path / "base")
    adapted = add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q", "v", "wo"])
    assert len(adapted) == 2 * 6 + 4  # q and v of the 6 attentions (2 encoder, 2 x 2 decoder), wo of 4 blocks
    torch.manual_seed(2)
    for layer in lora_layers(ours).values():
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
    save_peft_adapter(ours, tmp_path / "adapter", str(tmp_path / "base"))
    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base")
    assert logit_gap(PeftModel.from_pretrained(base, tmp_path / "adapter").eval(), ours.eval()) < 1e-4


def umt5_tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = encdec.preset("t5-v1.1-tiny", vocab_size=300, relative_bias_per_layer=True, dropout=0.0)
    return encdec.build_model(cfg).eval()


def test_a_server_batch_of_umt5_rows_each_at_its_own_position_equals_generate_alone():
    model = umt5_tiny()
    assert_served_equals_generate_alone(
        model,
        (2, 300),
        [(3, {"max_new_tokens": 4}), (20, {"max_new_tokens": 12}), (8, {"max_new_tokens": 9, "num_beams": 4})],
    )


def test_a_missing_layer_bias_is_named(tmp_path):
    saved("umt5", "tied", tmp_path)
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "model.safetensors")
    del weights["decoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"]
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="lacks the weight decoder.block.1.layer.0.SelfAttention.relative_att"):
        encdec.load_hf(tmp_path)


def test_what_the_families_cannot_express_is_one_sentence(tmp_path):
    tokenizer = build_tokenizer("byte")
    scaled = encdec.build_model(encdec.preset("t5-tiny", vocab_size=400, hf_model_type="mt5"))
    with pytest.raises(ConfigError, match="cannot be saved as Hugging Face mT5: mT5 never scales its output"):
        export_hf(scaled, tokenizer, tmp_path / "mt5")
    moe = encdec.build_model(encdec.preset("t5-tiny", vocab_size=400, relative_bias_per_layer=True, n_experts=2))
    with pytest.raises(ConfigError, match="cannot be saved as Hugging Face UMT5: experts.count must be 1"):
        export_hf(moe, tokenizer, tmp_path / "switch")
    assert not (tmp_path / "mt5").exists() and not (tmp_path / "switch").exists()
    with pytest.raises(
        ConfigError, match="^model.positions.relative_per_layer acts only with model.positions.kind relative"
    ):
        encdec.build_model(encdec.preset("transformer-tiny", relative_bias_per_layer=True))
    with pytest.raises(ConfigError, match="^model.hf_model_type is not used by the decoder_only family; remove it$"):
        encdec.build_model(encdec.preset("decoder_only-tiny", hf_model_type="mt5"))


MT5_SMALL = {  # google/mt5-small's published config.json (UMT5-small differs in its vocabulary and model_type)
    "architectures": ["MT5ForConditionalGeneration"],
    "d_ff": 1024,
    "d_kv": 64,
    "d_model": 512,
    "decoder_start_token_id": 0,
    "dropout_rate": 0.1,
    "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu",
    "is_encoder_decoder": True,
    "layer_norm_epsilon": 1e-06,
    "model_type": "mt5",
    "num_decoder_layers": 8,
    "num_heads": 6,
    "num_layers": 8,
    "pad_token_id": 0,
    "relative_attention_num_buckets": 32,
    "tie_word_embeddings": False,
    "vocab_size": 250112,
}
UMT5_SMALL = {
    **MT5_SMALL,
    "architectures": ["UMT5ForConditionalGeneration"],
    "model_type": "umt5",
    "vocab_size": 256384,
}


@pytest.mark.parametrize("published", [MT5_SMALL, UMT5_SMALL], ids=["mt5-small", "umt5-small"])
def test_encdec_size_of_a_published_config_json_is_transformers_parameter_count(published, tmp_path, capsys):
    """Counted from config.json alone; transformers ties the head it builds, the checkpoints' own is untied."""
    (tmp_path / "config.json").write_text(json.dumps(published))
    assert main(["size", str(tmp_path / "config.json")]) == 0
    keys = {k: v for k, v in published.items() if k not in ("architectures", "model_type")}
    name = published["architectures"][0]
    with torch.device("meta"):
        built = getattr(transformers, name)(
            getattr(transformers, name.replace("ForConditionalGeneration", "Config"))(**keys)
        )
        built.lm_head.weight = torch.nn.Parameter(torch.empty_like(built.lm_head.weight))
    expected = sum(p.numel() for p in built.parameters())
    assert f"parameters:                    {expected:,}\n" in capsys.readouterr().out
    assert published is not MT5_SMALL or expected == 300_176_768


@pytest.mark.parametrize("family", ["mt5", "umt5"])
def test_a_run_fine_tuned_from_the_checkpoint_keeps_its_family_in_model_json_and_exports_as_it(
    family, tmp_path, shared_data, capsys
):
    saved(family, "untied", tmp_path / "base")
    described, printed, reloaded = fine_tuned_and_exported(tmp_path / "base", tmp_path, shared_data, capsys, 32)
    assert (described["positions"]["relative_per_layer"], described["hf_model_type"]) == (
        family == "umt5",
        "mt5" if family == "mt5" else None,
    )
    assert FAMILIES[family][1] in printed
    assert logit_gap(reloaded, encdec.from_pretrained(tmp_path / "run")) < 1e-4


@pytest.mark.parametrize("family", ["mt5", "umt5"])
def test_a_config_json_without_its_keys_or_with_a_bad_value_is_one_sentence_naming_its_key(family, tmp_path):
    saved(family, "tied", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": family}))
    with pytest.raises(CheckpointError, match=f"config.json does not describe a {family} model \\(the key "):
        encdec.load_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_heads": 0}))
    with pytest.raises(CheckpointError, match="config.json: model.n_heads .*\\(config.json's num_heads\\)$"):
        encdec.load_hf(tmp_path)
