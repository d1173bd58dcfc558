"""scripts/whisper_model.py, which builds the speech recipe's Whisper-shaped directory: built from a few hundred
transcripts with a tiny vocabulary, it loads in transformers (its tokenizer an English-only Whisper's, its
timestamps after every text token, its feature extractor's window 10 s) and in encdec with the same logits on
real log-mels; bad flags and an --out through a link are one sentence."""

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import encdec
from encdec.audio import log_mel, read_audio_bytes

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "whisper_model.py"
TEXTS = ["A dog runs in the snow.", "Two men sit on a bench.", "The girl reads a book by the window."] * 40


def script():
    spec = importlib.util.spec_from_file_location("whisper_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper_model")
    (root / "data").mkdir()
    lines = [json.dumps({"audio": f"train/{i}.wav", "text": text}) + "\n" for i, text in enumerate(TEXTS)]
    (root / "data" / "train.jsonl").write_text("".join(lines))
    assert script().main(["--data", str(root / "data"), "--out", str(root / "out"), "--vocab-size", "300"]) == 0
    return root / "out"


def test_the_tokenizer_is_an_english_only_whisper_s_with_its_timestamps_last(built):
    tokenizer = transformers.AutoTokenizer.from_pretrained(built)
    assert type(tokenizer).__name__ == "WhisperTokenizer"
    ids = tokenizer("A dog runs.")["input_ids"]
    start, no_timestamps = tokenizer.convert_tokens_to_ids(["<|startoftranscript|>", "<|notimestamps|>"])
    assert ids[:2] == [start, no_timestamps] and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "A dog runs."
    first_timestamp = tokenizer.convert_tokens_to_ids("<|0.00|>")
    assert first_timestamp == no_timestamps + 1 and len(tokenizer) == first_timestamp + 1501
    assert max(ids[2:-1]) < tokenizer.eos_token_id < start  # the text's own tokens lie below every special


def test_the_directory_loads_in_transformers_and_in_encdec_with_the_same_logits(built):
    reference = transformers.WhisperForConditionalGeneration.from_pretrained(built).eval()
    extractor = transformers.WhisperFeatureExtractor.from_pretrained(built)
    assert extractor.chunk_length == 10 and reference.config.max_source_positions == 500
    assert reference.generation_config.is_multilingual is False
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed: the logits are compared on its speech")
    spoken = subprocess.run(["espeak-ng", "--stdout", "A dog runs in the snow."], capture_output=True, check=True)
    wave = read_audio_bytes(spoken.stdout)
    features = log_mel([wave], 80, frames=1000)
    expected_features = extractor(wave.numpy(), sampling_rate=16_000, return_tensors="pt").input_features
    assert (features - expected_features).abs().max().item() < 1e-4
    tokenizer = transformers.AutoTokenizer.from_pretrained(built)
    labels = torch.tensor([tokenizer("A dog runs in the snow.")["input_ids"]])
    ours = encdec.from_pretrained(built).eval()
    with torch.no_grad():
        expected = reference(input_features=features, decoder_input_ids=labels).logits
        got = ours(features, labels).logits
    assert (got - expected).abs().max().item() < 1e-4


@pytest.mark.parametrize("flag, value", [("--vocab-size", "10"), ("--seed", "-1"), ("--limit", "0")])
def test_a_number_out_of_its_range_is_one_sentence_before_anything_is_written(flag, value, tmp_path):
    with pytest.raises(SystemExit, match=f"^whisper_model.py: error: {flag} must be [^\n]*$"):
        script().main(["--data", str(tmp_path), "--out", str(tmp_path / "out"), flag, value])
    assert not (tmp_path / "out").exists()


def test_an_output_through_a_link_or_a_missing_corpus_is_one_sentence(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "train.jsonl").write_text(json.dumps({"audio": "a.wav", "text": "a dog"}) + "\n")
    with pytest.raises(SystemExit, match="whisper_model.py: error: .*link"):
        script().main(["--data", str(tmp_path), "--out", str(tmp_path / "out" / "model")])
    assert list((tmp_path / "elsewhere").iterdir()) == []
    with pytest.raises(SystemExit, match="train.jsonl does not exist: make the corpus first"):
        script().main(["--data", str(tmp_path / "elsewhere"), "--out", str(tmp_path / "y")])
    assert not (tmp_path / "y").exists()


def test_the_base_shape_has_whisper_base_s_token_layout_and_a_multilingual_generation_config(shared_data, tmp_path):
    """--shape base: Whisper's 51,865 ids where Whisper has them (faster-whisper's converter reads them so)."""
    module = script()
    shape = module.SHAPES["base"]()
    texts = module.read_texts(
        [
            shared_data / "tinystories" / "tinystories_train_head.txt.gz",
            shared_data / "lm_other" / "tinyshakespeare.txt.gz",
            shared_data / "translation" / "multi30k" / "train.de.gz",
        ]
    )
    tokenizer = module.whisper_tokenizer(texts, shape.pieces, tmp_path, shape)
    names = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>", "<|0.00|>"]
    assert tokenizer.convert_tokens_to_ids(names) == [50257, 50258, 50259, 50359, 50363, 50364]
    assert len(tokenizer) == 51865 and shape.window_seconds == 30
    config = module.generation_config(tokenizer, shape)
    assert config.is_multilingual and len(config.lang_to_id) == 99 and config.task_to_id["transcribe"] == 50359
    assert not set(config.suppress_tokens) & set(config.lang_to_id.values())  # detection reads the languages
    with pytest.raises(SystemExit, match="the texts make [0-9,]+ BPE pieces, not 50,257: give more text with --texts"):
        module.whisper_tokenizer(TEXTS, shape.pieces, tmp_path, shape)
    with pytest.raises(SystemExit, match="--shape base has 50,257 BPE pieces"):
        module.main(["--data", str(tmp_path), "--out", str(tmp_path / "out"), "--shape", "base", "--vocab-size", "300"])
