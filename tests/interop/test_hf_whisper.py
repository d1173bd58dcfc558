"""Whisper and Distil-Whisper (model_type whisper): tiny random checkpoints built with transformers (no download) read
into the whisper family equal transformers' on a padded batch of log-mels (logits, greedy and beam tokens from the
same decoder prompt), export back to WhisperForConditionalGeneration with the same logits and generation_config.json's
Whisper keys as read, write LoRA adapters peft loads under its names, are counted by `encdec size` from config.json
alone (the published large-v3 and distil-large-v3 too), and what the layout cannot hold is refused in one sentence."""

import json
import shutil

import pytest
import torch

import encdec
from encdec.cli import main
from encdec.errors import ConfigError, DataError
from encdec.interop import export_hf
from encdec.interop.from_hf import hf_model_config
from encdec.models.parameter_count import count_parameters_of
from encdec.tokenizers import build_tokenizer
from tests.interop import parity_kit

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

V, PAD, EOS, START = 384, 380, 380, 381  # the byte tokenizer's ids lie below V (an export writes it)
SHAPE = dict(vocab_size=V, d_model=32, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64)
SHAPE |= dict(decoder_ffn_dim=64, num_mel_bins=80, max_source_positions=1500, max_target_positions=64)
SHAPE |= dict(pad_token_id=PAD, eos_token_id=EOS, bos_token_id=EOS, decoder_start_token_id=START)
SHAPE |= dict(suppress_tokens=None, begin_suppress_tokens=None)
LAYERS = {
    "whisper": dict(encoder_layers=2, decoder_layers=2),
    "distil-whisper": dict(encoder_layers=3, decoder_layers=2),
}
WHISPER_KEYS = {  # generation_config.json's keys of Whisper's own decoding, which an export writes back as read
    "lang_to_id": {"<|en|>": 370, "<|fr|>": 371},
    "task_to_id": {"transcribe": 373, "translate": 372},
    "no_timestamps_token_id": 374,
    "is_multilingual": True,
    "alignment_heads": [[1, 0], [1, 2]],
}


@pytest.fixture(scope="module", params=list(LAYERS))
def model_dir(request, tmp_path_factory):
    """A random-weight WhisperForConditionalGeneration (every weight moved off its initial value) saved with a
    generation_config.json holding Whisper's keys."""
    path = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**SHAPE, **LAYERS[request.param]))
    parity_kit.saved_jittered(model.eval(), path, 0.05)
    generation = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps(generation | WHISPER_KEYS))
    return path


@pytest.fixture(scope="module")
def pair(model_dir):
    reference = transformers.WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    return reference, encdec.load_hf(model_dir)


def log_mels(rows: int = 2, mels: int = 80) -> torch.Tensor:
    """(rows, mels, 3000): clips of 30 s and shorter ones padded to 30 s with one value, as a feature extractor pads
    silence."""
    features = torch.randn(rows, mels, 3000, generator=torch.Generator().manual_seed(1))
    for row in range(1, rows):
        features[row, :, 3000 // (row + 1) :] = -0.75
    return features


def decoder_inputs(rows: int = 2, length: int = 9) -> torch.Tensor:
    ids = torch.randint(0, 370, (rows, length), generator=torch.Generator().manual_seed(2))
    ids[:, 0] = START
    return ids


def logit_gap(reference, ours, features=None, tgt=None) -> float:
    features = log_mels() if features is None else features
    tgt = decoder_inputs() if tgt is None else tgt
    with torch.no_grad():
        expected = reference(input_features=features, decoder_input_ids=tgt).logits
        got = ours(features, tgt).logits
    return (got - expected).abs().max().item()


def test_logits_equal_transformers_on_a_padded_batch_of_log_mels(pair):
    assert logit_gap(*pair) < 1e-4


def test_open_model_reads_the_directory_as_load_hf_does(pair, model_dir):
    opened = encdec.from_pretrained(model_dir)
    assert opened.config == pair[1].config and logit_gap(pair[0], opened) < 1e-4


def test_the_checkpoint_reads_as_whisper_s_layout(pair, model_dir):
    reference, ours = pair
    cfg = ours.config
    assert (cfg.family, cfg.norms.position, cfg.attention.bias, cfg.positions.kind) == (
        "whisper",
        "pre",
        "qvo",
        "learned",
    )
    assert (cfg.audio.n_mels, cfg.audio.max_source_positions, cfg.positions.max) == (80, 1500, 64)
    assert cfg.decoder_layers == reference.config.decoder_layers and cfg.embeddings.tie and not cfg.embeddings.scale
    assert ours.encoder.blocks[0].self_attn.k.bias is None and ours.decoder.blocks[0].cross_attn.k.bias is None
    assert torch.equal(ours.encoder.positions.weight, reference.model.encoder.embed_positions.weight)  # as given
    assert ours.hf_generation == WHISPER_KEYS


@pytest.mark.parametrize("options", [dict(), dict(num_beams=4, num_return_sequences=2)], ids=["greedy", "beam-4"])
def test_generated_tokens_equal_transformers_from_the_same_decoder_prompt(pair, options):
    """transformers' generation loop itself (GenerationMixin.generate; Whisper's own generate adds its prompts and
    timestamp rules, the decoding rules' tests) from the same prompt of start, language and task tokens."""
    reference, ours = pair
    features, prompt = log_mels(), torch.tensor([[START, 370, 373], [START, 371, 373]])
    options = dict(options, max_new_tokens=10)
    expected = transformers.GenerationMixin.generate(
        reference, input_features=features, decoder_input_ids=prompt, do_sample=False, **options
    )
    assert torch.equal(ours.generate(features, decoder_input_ids=prompt, **options), expected)


def test_an_export_reloads_in_transformers_with_the_same_logits_and_whisper_s_generation_keys(pair, tmp_path):
    reference, ours = pair
    assert export_hf(ours, build_tokenizer("byte"), tmp_path / "out") == "WhisperForConditionalGeneration"
    reloaded = transformers.WhisperForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    assert logit_gap(reloaded, ours) < 1e-4
    written = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert {key: written[key] for key in WHISPER_KEYS} == WHISPER_KEYS
    assert encdec.load_hf(tmp_path / "out").config == ours.config


def test_lora_with_peft_s_names_exports_an_adapter_peft_loads_with_equal_logits(model_dir, pair, tmp_path):
    from peft import PeftModel

    from encdec.interop.peft_adapter import hf_module_names, save_peft_adapter
    from encdec.models.lora import add_lora, lora_layers

    ours = encdec.load_hf(model_dir)
    names = hf_module_names(ours)
    assert names["encoder.blocks.0.self_attn.k"] == "model.encoder.layers.0.self_attn.k_proj"
    assert names["decoder.blocks.1.cross_attn.o"] == "model.decoder.layers.1.encoder_attn.out_proj"
    added = add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q", "k", "v", "wo"])
    layers = pair[0].config.encoder_layers + 2 * pair[0].config.decoder_layers  # attentions
    assert len(added) == 3 * layers + pair[0].config.encoder_layers + pair[0].config.decoder_layers
    torch.manual_seed(2)
    for layer in lora_layers(ours).values():
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
    targets = save_peft_adapter(ours, tmp_path / "adapter", str(model_dir))
    assert "model.decoder.layers.0.fc2" in targets and "model.encoder.layers.0.self_attn.k_proj" in targets
    base = transformers.WhisperForConditionalGeneration.from_pretrained(model_dir)
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    # peft's seq2seq wrapper passes input_ids, which Whisper does not take: the adapted model itself is called
    assert logit_gap(adapted.get_base_model(), ours.eval()) < 1e-4


def test_size_counts_what_transformers_trains(pair, model_dir):
    """encdec's count leaves out the encoder's fixed sinusoids (a buffer here, a frozen parameter there)."""
    learned = sum(p.numel() for name, p in pair[0].named_parameters() if name != "model.encoder.embed_positions.weight")
    assert count_parameters_of(hf_model_config(model_dir)).total == learned


WHISPER_LARGE_V3 = {  # openai/whisper-large-v3's published config.json, the keys transformers reads
    "architectures": ["WhisperForConditionalGeneration"],
    "model_type": "whisper",
    "vocab_size": 51866,
    "num_mel_bins": 128,
    "d_model": 1280,
    "encoder_layers": 32,
    "decoder_layers": 32,
    "encoder_attention_heads": 20,
    "decoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "decoder_ffn_dim": 5120,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "activation_function": "gelu",
    "scale_embedding": False,
    "pad_token_id": 50256,
    "bos_token_id": 50257,
    "eos_token_id": 50257,
    "decoder_start_token_id": 50258,
    "torch_dtype": "float16",
}
DISTIL_LARGE_V3 = WHISPER_LARGE_V3 | {"decoder_layers": 2}  # distil-whisper/distil-large-v3's


@pytest.mark.parametrize("published", [WHISPER_LARGE_V3, DISTIL_LARGE_V3], ids=["large-v3", "distil-large-v3"])
def test_encdec_size_of_a_published_config_json_is_transformers_count(published, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(published))
    assert main(["size", str(tmp_path)]) == 0
    keys = {k: v for k, v in published.items() if k not in ("architectures", "model_type", "torch_dtype")}
    with torch.device("meta"):
        built = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**keys))
    learned = sum(p.numel() for name, p in built.named_parameters() if name != "model.encoder.embed_positions.weight")
    assert f"parameters:                    {learned:,}\n" in capsys.readouterr().out
    assert published is not WHISPER_LARGE_V3 or learned + 1500 * 1280 == 1_543_490_560  # large-v3's 1.55B


@pytest.mark.parametrize(
    "changed, message",
    [
        ({"decoder_attention_heads": 2}, r"encoder_attention_heads \(4\) differs from decoder_attention_heads \(2\)"),
        ({"activation_function": "tanh"}, "activation_function 'tanh' is not supported"),
        ({"d_model": 33}, r"d_model \(33\) is odd; Whisper's sinusoidal encoder positions need it even"),
        ({"num_mel_bins": 0}, r"model.audio.n_mels must be .*config.json's num_mel_bins"),
    ],
    ids=["heads", "activation", "odd-width", "mel-bins"],
)
def test_what_the_layout_cannot_hold_is_refused_in_one_sentence(model_dir, tmp_path, changed, message):
    shutil.copytree(model_dir, tmp_path / "model")
    parity_kit.assert_refused_in_one_sentence(tmp_path / "model", changed, message)


def test_scale_embedding_reads_as_transformers_computes_it_unapplied(pair, model_dir, tmp_path):
    shutil.copytree(model_dir, tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    (tmp_path / "model" / "config.json").write_text(json.dumps(config | {"scale_embedding": True}))
    assert logit_gap(pair[0], encdec.load_hf(tmp_path / "model")) < 1e-4


def test_inputs_that_are_not_log_mels_are_one_sentence(pair):
    ours = pair[1]
    with pytest.raises(DataError, match=r"^this model reads features: a \(batch, channels, frames\) tensor of floats"):
        ours.generate(torch.randint(0, V, (2, 9)))
    with pytest.raises(DataError, match=r"^this model reads log-mel features, a \(batch, 80, frames\) float tensor"):
        ours.generate(torch.randn(2, 128, 3000))
    with pytest.raises(DataError, match="^the input has 3,002 frames but this model reads at most 3,000"):
        ours.generate(torch.randn(1, 80, 3002))
    with pytest.raises(DataError, match="^the input is empty"):
        ours(torch.randn(0, 80, 3000), decoder_inputs(0))
    # the decoder's positions after the start token: 65 new ones and Whisper's prompt's language and <|notimestamps|>
    with pytest.raises(ConfigError, match="^max_new_tokens is 67 but this model decodes at most 64"):
        ours.generate(log_mels(1), max_new_tokens=65)
