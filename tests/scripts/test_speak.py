"""scripts/speak.py, which speaks the speech corpus with espeak-ng: a tiny run writes manifests whose every line
names a 16 kHz mono wav file, its noisy test clips hold the SNR written to within 0.5 dB, its splits share no
sentence, the held-out voice speaks none of train, a long recording's segments tile its transcript, and the same
seed writes the same bytes."""

import hashlib
import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from encdec.audio import SAMPLE_RATE, log_mel, read_audio
from tests.conftest import SHARED_DATA

soundfile = pytest.importorskip("soundfile")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed (apt install espeak-ng)"),
]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "speak.py"
TINY = ["--train", "8", "--valid", "3", "--test", "4", "--limit", "200", "--snrs", "10,5", "--train-noise", "0.5"]
FIELDS = {"audio", "text", "voice", "rate", "pitch", "snr", "noise"}
SPLITS = ("train", "valid", "test", "test_voice", "test_noisy")


def script():
    spec = importlib.util.spec_from_file_location("speak", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def manifest(out: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (out / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]


def key(text: str) -> str:
    return " ".join(re.sub(r"[^a-z ]", "", text.lower()).split())


@pytest.fixture(scope="module")
def spoken(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("speech") / "out"
    assert script().main(["--out", str(out), "--data", str(SHARED_DATA), *TINY, "--long", "6"]) == 0
    return out


def test_every_manifest_line_names_a_16_khz_mono_wav_beside_it(spoken):
    counts = {"train": 8, "valid": 3, "test": 4, "test_voice": 4, "test_noisy": 4, "long": 1}
    for split, count in counts.items():
        rows = manifest(spoken, split)
        assert len(rows) == count
        for row in rows:
            assert FIELDS <= set(row) and row["text"] and not Path(row["audio"]).is_absolute()
            assert row["audio"].startswith(f"{split}/") and ".." not in row["audio"]
            info = soundfile.info(spoken / row["audio"])
            assert (info.samplerate, info.channels, info.subtype) == (SAMPLE_RATE, 1, "PCM_16")
            assert len(read_audio(spoken / row["audio"])) == info.frames > SAMPLE_RATE // 2
    assert json.loads((spoken / "speech.json").read_text())["counts"] == counts


def test_the_noisy_test_clips_hold_the_snr_written_within_half_a_decibel(spoken):
    clean, noisy = manifest(spoken, "test"), manifest(spoken, "test_noisy")
    assert [row["snr"] for row in clean] == [None] * 4 and {row["noise"] for row in noisy} == {"white", "babble"}
    for before, after in zip(clean, noisy, strict=True):
        assert {k: v for k, v in before.items() if k not in ("audio", "snr", "noise")} == {
            k: v for k, v in after.items() if k not in ("audio", "snr", "noise")
        }
        speech = read_audio(spoken / before["audio"]).double().numpy()
        noise = read_audio(spoken / after["audio"]).double().numpy() - speech
        snr = 10 * np.log10(np.sum(speech**2) / np.sum(noise**2))
        assert abs(snr - after["snr"]) < 0.5
    assert {(row["noise"], round(row["snr"])) for row in noisy} == {
        (k, snr) for k in ("white", "babble") for snr in (5, 10)
    }
    train = manifest(spoken, "train")
    assert all(row["snr"] is None or row["noise"] in ("white", "babble") for row in train)


def test_the_splits_share_no_sentence_and_the_held_out_voice_speaks_none_of_train(spoken):
    texts = {split: {key(row["text"]) for row in manifest(spoken, split)} for split in SPLITS}
    assert texts["train"].isdisjoint(texts["valid"]) and texts["train"].isdisjoint(texts["test"])
    assert texts["valid"].isdisjoint(texts["test"])
    assert texts["test_voice"] == texts["test_noisy"] == texts["test"]
    long = manifest(spoken, "long")[0]
    assert texts["train"].isdisjoint(key(segment["text"]) for segment in long["segments"])
    held_out = json.loads((spoken / "speech.json").read_text())["test_voice"]
    for split in ("train", "valid", "test", "test_noisy"):
        assert held_out not in {row["voice"].split("+")[0] for row in manifest(spoken, split)}
    assert {row["voice"].split("+")[0] for row in manifest(spoken, "test_voice")} == {held_out}


def test_a_long_recording_s_segments_lie_in_order_and_make_its_transcript(spoken):
    long = manifest(spoken, "long")[0]
    wave = read_audio(spoken / long["audio"])
    seconds = len(wave) / SAMPLE_RATE
    assert 6 <= seconds == pytest.approx(long["seconds"], abs=1e-3)
    ends = [0.0] + [edge for segment in long["segments"] for edge in (segment["start"], segment["end"])]
    assert ends == sorted(ends) and ends[-1] == pytest.approx(seconds, abs=1e-3)  # no pause after the last
    assert long["text"] == " ".join(segment["text"] for segment in long["segments"])
    near = SAMPLE_RATE // 1000  # the times are written to the millisecond
    for before, after in zip(long["segments"], long["segments"][1:]):  # silence between, speech at the edges
        end, start = round(before["end"] * SAMPLE_RATE), round(after["start"] * SAMPLE_RATE)
        assert start - end >= 0.3 * SAMPLE_RATE - 2 * near and wave[end + near : start - near].abs().max() == 0
        assert wave[start - near : start + near].abs().max() > 0 and wave[end - near : end + near].abs().max() > 0


@pytest.mark.parametrize("n_mels", [80, 128])
def test_the_front_end_equals_whisper_s_feature_extractor_on_the_script_s_speech(spoken, n_mels):
    """The issue's must-show: log_mel within 1e-4 of transformers on a padded batch of the corpus's own clips."""
    transformers = pytest.importorskip("transformers")
    rows = manifest(spoken, "test") + manifest(spoken, "test_noisy") + manifest(spoken, "long")
    waves = [read_audio(spoken / row["audio"]) for row in rows]
    expected = transformers.WhisperFeatureExtractor(feature_size=n_mels)(
        [wave.numpy() for wave in waves], sampling_rate=SAMPLE_RATE, return_tensors="pt"
    )
    assert (log_mel(waves, n_mels=n_mels) - expected.input_features).abs().max().item() < 1e-4


def test_the_same_seed_writes_the_same_bytes(tmp_path):
    tiny = [
        "--data",
        str(SHARED_DATA),
        "--train",
        "2",
        "--valid",
        "1",
        "--test",
        "1",
        "--limit",
        "100",
        "--noise",
        "white",
    ]
    digests = []
    for name in ("a", "b"):
        assert script().main(["--out", str(tmp_path / name), *tiny]) == 0
        files = sorted(p for p in (tmp_path / name).rglob("*") if p.is_file())
        digests.append({str(p.relative_to(tmp_path / name)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files})
    assert digests[0] == digests[1] and len(digests[0]) == 12  # 5 manifests, speech.json, 6 wav files


@pytest.mark.parametrize(
    "flag, value",
    [("--train", "-1"), ("--snrs", "100"), ("--snrs", "x"), ("--rate-min", "10"), ("--long", "2"), ("--limit", "0")],
)
def test_a_setting_out_of_its_range_is_one_sentence_before_anything_is_written(flag, value, tmp_path):
    with pytest.raises(SystemExit, match=f"^speak.py: error: {flag}[^\n]* must be [^\n]*$"):
        script().main(["--out", str(tmp_path / "out"), flag, value])
    assert not (tmp_path / "out").exists()


def test_an_unknown_held_out_voice_is_one_sentence(tmp_path):
    with pytest.raises(SystemExit, match="^speak.py: error: --test-voice klingon is not an installed voice: en"):
        script().main(["--out", str(tmp_path / "out"), "--test-voice", "klingon", "--limit", "50"])


def test_an_output_through_a_link_is_refused_and_nothing_is_written_where_it_leads(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SystemExit, match="speak.py: error: .*symlink"):
        script().main(["--out", str(tmp_path / "out"), *TINY])
    assert list((tmp_path / "elsewhere").iterdir()) == []
