"""benchmarks/bench_longform.py on a tiny random Whisper (a 4 s window) and espeak-ng sentences joined by pauses:
a row for each decoding, the batched ones at the model's window and at --chunk-length, long form within pieces
at --chunk-length; numbers out of their range
(or past the model's window, or the recordings) one line each."""

import importlib.util
import json

import pytest

from tests.transcription import speech_kit

transformers = pytest.importorskip("transformers")
soundfile = pytest.importorskip("soundfile")
pytestmark = [speech_kit.needs_espeak, pytest.mark.usefixtures("one_thread")]
SCRIPT = speech_kit.SCRIPT.parents[1] / "benchmarks" / "bench_longform.py"


def bench():
    spec = importlib.util.spec_from_file_location("bench_longform", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A model directory and a speech corpus of one long recording: DATA/long.jsonl as scripts/speak.py writes it."""
    root = tmp_path_factory.mktemp("longform")
    (root / "model").mkdir()
    speech_kit.tiny_whisper_dir(root / "model")
    wave, pauses = speech_kit.with_pauses(speech_kit.SENTENCES * 2)
    (root / "data" / "long").mkdir(parents=True)
    soundfile.write(root / "data" / "long" / "000000.wav", wave.numpy(), 16_000)
    edges = [0, *(edge for pause in pauses for edge in pause), len(wave)]
    segments = [
        {"start": a / 16_000, "end": b / 16_000, "text": text}
        for a, b, text in zip(edges[::2], edges[1::2], speech_kit.SENTENCES * 2)
    ]
    record = {"audio": "long/000000.wav", "text": " ".join(speech_kit.SENTENCES * 2), "segments": segments}
    (root / "data" / "long.jsonl").write_text(json.dumps(record) + "\n")
    return root


def test_each_decoding_has_its_row_the_batched_ones_at_the_window_and_at_chunk_length(place, capsys):
    bench().main([str(place / "model"), str(place / "data"), "--chunk-length", "1.5", "2.5"])
    rows = [line.strip("| \n").split(" | ") for line in capsys.readouterr().out.splitlines()[3:]]
    assert [row[0] for row in rows] == [
        "long-form, greedy, previous text",
        "long-form, greedy",
        "long-form, openai-whisper's defaults",
        "long-form within pieces of 1.5 s, greedy",
        "long-form within pieces of 1.5 s, greedy, previous text",
        "long-form within pieces of 2.5 s, greedy",
        "long-form within pieces of 2.5 s, greedy, previous text",
        "batched, chunk_length 4 s",
        "batched, chunk_length 1.5 s",
        "batched, chunk_length 2.5 s",
        "sentences one by one",
    ]
    assert all(float(row[1]) >= 0 and len(row) == 5 for row in rows)  # a WER, segments, wall s, audio s / wall s
    pieces = [int(row[2]) for row in rows[7:10]]  # the window's, 1.5 s, 2.5 s: shorter pieces, more of them
    assert pieces[1] >= pieces[2] >= pieces[0] and pieces[1] > pieces[0]
    within = [int(row[2]) for row in rows[3:7:2]]  # segments within pieces of 1.5 s and 2.5 s, greedy
    assert within[0] >= pieces[1] and within[1] >= pieces[2]  # a segment a piece at least


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--chunk-length", "0", "--chunk-length must be at least 0.1"),
        ("--chunk-length", "4.5", "--chunk-length must be from 0.1 s to the model's window of 4 s"),
        ("--chunk-length", "2 4.5", "--chunk-length must be from 0.1 s to the model's window of 4 s"),
        ("--index", "1", "--index must be below 1"),
        ("--index", "-1", "--index must be"),
        ("--threads", "0", "--threads must be"),
    ],
)
def test_numbers_out_of_their_range_are_one_line_each(place, capsys, flag, value, says):
    with pytest.raises(SystemExit) as stopped:
        bench().main([str(place / "model"), str(place / "data"), flag, *value.split()])  # several: a row each
    error = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and says in error[-1], error
