"""`encdec transcribe MODEL AUDIO...` on a tiny random Whisper directory (with the byte tokenizer) and espeak-ng
speech longer than its window: the text printed, one file per recording and format written under --out (srt
and vtt read back by their parsers, verbose_json's segments those of the Python API), and every bad argument
or recording one sentence and a non-zero exit."""

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from encdec.cli import main
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.tokenizers import build_tokenizer
from tests.generation import whisper_kit

transformers = pytest.importorskip("transformers")
srt = pytest.importorskip("srt")
webvtt = pytest.importorskip("webvtt")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs apt's espeak-ng to speak the recordings"),
]
FAST = ["--max-new-tokens", "8", "--temperature", "0", "--language", "en"]


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper")
    whisper_kit.tiny_whisper(transformers, path)
    convert_tokenizer(build_tokenizer("byte")).save(path)
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech")
    paths = []
    for name, text in (("dog", "A dog runs in the snow."), ("bench", "Two men sit on a bench.")):
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "170", "-w", str(root / f"{name}.wav"), text], check=True)
        paths.append(root / f"{name}.wav")
    return paths


def one_sentence(capsys, start: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"encdec: error: {start}"), err


def test_the_text_is_printed_and_each_format_written_and_read_back(whisper_dir, recordings, tmp_path, capsys):
    from encdec.runs.open import open_model
    from encdec.transcription import render
    from encdec.transcription.longform import Transcriber

    assert main(["transcribe", str(whisper_dir), *map(str, recordings), *FAST]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["transcribe", str(whisper_dir), *map(str, recordings), *FAST, "--out", str(out)]) == 0
    names = {path.name for path in out.iterdir()}
    assert names == {
        f"{stem}{suffix}" for stem in ("dog", "bench") for suffix in (".txt", ".json", ".verbose.json", ".srt", ".vtt")
    }
    opened = open_model(whisper_dir)
    options = dict(max_new_tokens=8, temperature=[0.0], language="en")
    expected = Transcriber(
        opened.model,
        opened.text,
        True,
        **options,
        no_speech_threshold=0.6,
        logprob_threshold=-1.0,
        compression_ratio_threshold=2.4,
    )(list(map(str, recordings)))
    assert printed == "".join(render(transcript, "text") for transcript in expected)
    for stem, transcript in zip(("dog", "bench"), expected):
        verbose = json.loads((out / f"{stem}.verbose.json").read_text())
        assert [segment["tokens"] for segment in verbose["segments"]] == [list(s.tokens) for s in transcript.segments]
        assert verbose["text"] == transcript.text
        assert json.loads((out / f"{stem}.json").read_text())["text"] == transcript.text
        cues = list(srt.parse((out / f"{stem}.srt").read_text()))
        vtt = webvtt.read(str(out / f"{stem}.vtt"))
        assert len(cues) == len(vtt.captions) == len([s for s in transcript.segments if s.text.strip()])
        assert len(transcript.segments) > 1 and transcript.duration > 1


@pytest.mark.parametrize("pieces", [None, 0.3], ids=["windows", "pieces"])
def test_word_timestamps_are_written_into_verbose_json(whisper_dir, recordings, tmp_path, capsys, pieces):
    """--word-timestamps: verbose_json's words are the Python API's (Transcriber(word_timestamps=True)), over the
    whole recording's windows and over its pieces cut at pauses (--chunk-length without --batched)."""
    from dataclasses import asdict

    from encdec.runs.open import open_model
    from encdec.transcription.longform import Transcriber

    out = tmp_path / "out"
    argv = ["transcribe", str(whisper_dir), str(recordings[0]), *FAST, "--no-previous-text", "--out", str(out)]
    argv += [] if pieces is None else ["--chunk-length", str(pieces)]
    assert main([*argv, "--word-timestamps", "--format", "verbose_json"]) == 0, capsys.readouterr().err
    verbose = json.loads((out / "dog.verbose.json").read_text())
    opened = open_model(whisper_dir)
    options = dict(max_new_tokens=8, temperature=[0.0], language="en", word_timestamps=True, chunk_length=pieces)
    options |= dict(no_speech_threshold=0.6, logprob_threshold=-1.0, compression_ratio_threshold=2.4)
    [expected] = Transcriber(opened.model, opened.text, **options)([str(recordings[0])])
    assert expected.words and verbose["words"] == [asdict(word) for word in expected.words]
    assert all(0 <= word["start"] <= word["end"] for word in verbose["words"])
    assert [segment["tokens"] for segment in verbose["segments"]] == [list(s.tokens) for s in expected.segments]
    if pieces is not None:  # every segment within a piece of at most 0.3 s
        from encdec.audio import SAMPLE_RATE, read_audio
        from encdec.transcription.segmentation import cut_at_pauses

        spans = [
            (a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in cut_at_pauses(read_audio(recordings[0]), SAMPLE_RATE, 0.3)
        ]
        assert len(spans) > 2
        for segment in verbose["segments"]:
            assert any(a - 0.011 <= segment["start"] <= segment["end"] <= b + 1e-6 for a, b in spans), segment


def test_batched_word_timestamps_are_transcribe_batched_s(whisper_dir, recordings, tmp_path, capsys):
    """--batched --word-timestamps: verbose_json's words are transcribe_batched(word_timestamps=True)'s."""
    from dataclasses import asdict

    from encdec.runs.open import open_model
    from encdec.transcription.batched import transcribe_batched

    out = tmp_path / "out"
    argv = ["transcribe", str(whisper_dir), str(recordings[0]), *FAST, "--batched", "--chunk-length", "0.3"]
    assert main([*argv, "--word-timestamps", "--format", "verbose_json", "--out", str(out)]) == 0
    verbose = json.loads((out / "dog.verbose.json").read_text())
    opened = open_model(whisper_dir)
    options = dict(max_new_tokens=8, temperature=[0.0], language="en", chunk_length=0.3, word_timestamps=True)
    options |= dict(return_timestamps=True)
    options |= dict(no_speech_threshold=0.6, logprob_threshold=-1.0, compression_ratio_threshold=2.4)
    [expected] = transcribe_batched(opened.model, opened.text, [str(recordings[0])], opened.generation, **options)
    assert len(expected.segments) > 2 and expected.words
    assert verbose["words"] == [asdict(word) for word in expected.words]


def test_an_initial_prompt_is_the_previous_text_of_the_first_window(whisper_dir, recordings, tmp_path, capsys):
    from encdec.runs.open import open_model
    from encdec.transcription import render
    from encdec.transcription.longform import Transcriber

    argv = ["transcribe", str(whisper_dir), str(recordings[0]), *FAST, "--no-previous-text"]
    assert main([*argv, "--initial-prompt", "  dog "]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    opened = open_model(whisper_dir)
    ids = [whisper_kit.PREV, *opened.text.text.encode(" dog", add_special_tokens=False)]
    options = dict(max_new_tokens=8, temperature=[0.0], language="en", prompt_ids=ids)
    options |= dict(no_speech_threshold=0.6, logprob_threshold=-1.0, compression_ratio_threshold=2.4)
    [expected] = Transcriber(opened.model, opened.text, **options)([str(recordings[0])])
    assert printed == render(expected, "text")
    assert main(argv) == 0 and capsys.readouterr().out != printed  # the prompt changed what was decoded
    assert main([*argv, "--initial-prompt", "x" * 2001]) == 2
    one_sentence(capsys, "--initial-prompt must hold some text, at most 2,000 characters")


@pytest.mark.parametrize(
    "extra, start",
    [
        (["--format", "doc"], "--format takes txt"),
        (["--temperature", "-1"], "--temperature must be a list"),
        (["--beams", "0"], "--beams must be"),
        (["--batched", "--chunk-length", "0"], "--chunk-length must be at least 0.1, got 0"),
        (["--batched", "--chunk-length", "nan"], "--chunk-length must be a finite number"),
        (["--batched", "--chunk-length", "0.7"], "--chunk-length must be from 0.1 s to the model's window of 0.6 s"),
        (["--chunk-length", "0.7"], "--chunk-length must be from 0.1 s to the model's window of 0.6 s"),
        (["--batched", "--speech-pad", "-0.1"], "--speech-pad must be zero or more"),
        (["--chunk-length", "0.3", "--speech-pad", "-0.1"], "--speech-pad must be zero or more"),
        (["--speech-pad", "0.4"], "--speech-pad pads the pieces cut at pauses: add --chunk-length or --batched"),
        (["--language", "xx"], "language 'xx' is not one this model knows"),
        (["--task", "sing"], "--task must be transcribe or translate"),
    ],
)
def test_bad_arguments_are_one_sentence(whisper_dir, recordings, extra, start, capsys):
    assert main(["transcribe", str(whisper_dir), str(recordings[0]), *extra]) == 2
    one_sentence(capsys, start)


def test_bad_recordings_and_models_are_one_sentence(whisper_dir, recordings, tmp_path, capsys):
    assert main(["transcribe", str(whisper_dir), str(tmp_path / "none.wav")]) == 2
    one_sentence(capsys, "audio file")
    (tmp_path / "notes.wav").write_text("not a recording")
    assert main(["transcribe", str(whisper_dir), str(tmp_path / "notes.wav"), *FAST]) == 2
    one_sentence(capsys, "")
    ten_hours = 8_000 * 36_000  # 8-bit mono at 8 kHz: a sparse file, its header says 10 h
    with open(tmp_path / "long.wav", "wb") as out:
        out.write(
            b"RIFF"
            + struct.pack("<I", 36 + ten_hours)
            + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, 8000, 8000, 1, 8)
        )
        out.write(b"data" + struct.pack("<I", ten_hours))
        out.truncate(44 + ten_hours)
    assert main(["transcribe", str(whisper_dir), str(tmp_path / "long.wav")]) == 2
    one_sentence(capsys, f"audio file {tmp_path / 'long.wav'} lasts 10.0 h, longer than the 2.0 h allowed")
    (tmp_path / "again").mkdir()
    shutil.copy(recordings[0], tmp_path / "again" / recordings[0].name)
    both = [str(recordings[0]), str(tmp_path / "again" / recordings[0].name)]
    assert main(["transcribe", str(whisper_dir), *both, "--out", str(tmp_path / "out")]) == 2
    one_sentence(capsys, "two recordings are named 'dog'")
    text_run = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_2ba69c1" / "run"  # a byte-level T5
    assert main(["transcribe", str(text_run), str(recordings[0])]) == 2
    one_sentence(capsys, f"{text_run} is a text model: transcribe needs a speech model")


def test_batched_writes_what_transcribe_batched_gives_each_recording(whisper_dir, recordings, tmp_path, capsys):
    from encdec.runs.open import open_model
    from encdec.transcription import render
    from encdec.transcription.batched import transcribe_batched

    out = tmp_path / "batched"
    argv = ["transcribe", str(whisper_dir), *map(str, recordings), *FAST, "--batched", "--out", str(out)]
    assert main([*argv, "--format", "verbose_json,srt"]) == 0, capsys.readouterr().err
    opened = open_model(whisper_dir)
    options = dict(max_new_tokens=8, temperature=[0.0], language="en", return_timestamps=True)
    options |= dict(no_speech_threshold=0.6, logprob_threshold=-1.0, compression_ratio_threshold=2.4)
    expected = transcribe_batched(opened.model, opened.text, list(map(str, recordings)), opened.generation, **options)
    for path, transcript in zip(recordings, expected):
        assert json.loads((out / f"{path.stem}.verbose.json").read_text()) == json.loads(
            render(transcript, "verbose_json")
        )
        assert list(srt.parse((out / f"{path.stem}.srt").read_text())) == list(srt.parse(render(transcript, "srt")))
    shorter = dict(chunk_length=0.25, speech_pad=0.05)  # the model's window is 0.6 s: each recording in more pieces
    assert main([*argv, "--format", "verbose_json", "--chunk-length", "0.25", "--speech-pad", "0.05"]) == 0
    cut = transcribe_batched(
        opened.model, opened.text, list(map(str, recordings)), opened.generation, **options, **shorter
    )
    for path, transcript, whole in zip(recordings, cut, expected):
        assert json.loads((out / f"{path.stem}.verbose.json").read_text()) == json.loads(
            render(transcript, "verbose_json")
        )
        assert len({s.seek for s in transcript.segments}) > len({s.seek for s in whole.segments})  # more pieces


def test_independent_windows_batched_print_what_window_after_window_prints(whisper_dir, recordings, capsys):
    """--without-timestamps --no-previous-text: --batch-size windows of a recording decode together (1: one at a
    time), the printed segments the same."""
    flags = [*FAST, "--without-timestamps", "--no-previous-text", "--format", "verbose_json"]
    printed = []
    for size in ("1", "8"):
        assert main(["transcribe", str(whisper_dir), str(recordings[1]), *flags, "--batch-size", size]) == 0
        printed.append(json.loads(capsys.readouterr().out))
    one, batched = ([(s["seek"], s["tokens"], s["start"], s["end"]) for s in p["segments"]] for p in printed)
    assert one == batched and len(one) > 2
