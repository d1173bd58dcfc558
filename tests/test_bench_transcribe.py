"""benchmarks/bench_transcribe.py on a tiny random Whisper (a 4 s window) and real speech: each engine run in a
process of its own over the same windows, its row in the table. faster-whisper's column is left out here: it reads
30-second windows only (its feature extractor's 3,000 frames), which this model's 4 s window is not."""

import importlib.util
import math

import pytest

from tests.transcription import speech_kit

transformers = pytest.importorskip("transformers")
soundfile = pytest.importorskip("soundfile")
pytestmark = [speech_kit.needs_espeak, pytest.mark.usefixtures("one_thread")]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("| \n").split(" | ")]


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "bench_transcribe", speech_kit.SCRIPT.parents[1] / "benchmarks" / "bench_transcribe.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_encdec_and_transformers_decode_the_same_windows_each_in_a_process_of_its_own(tmp_path, capsys):
    bench = load_bench()
    (tmp_path / "model").mkdir()
    model = speech_kit.tiny_whisper_dir(tmp_path / "model")
    wave, _ = speech_kit.with_pauses(speech_kit.SENTENCES * 2)
    soundfile.write(tmp_path / "talk.wav", wave.numpy(), 16_000)
    windows = math.ceil(len(wave) / 16_000 / speech_kit.WINDOW_SECONDS)
    engines = ["encdec", "encdec-sequential", "transformers", "transformers-batched"]
    argv = [str(model), str(tmp_path / "no-ct2"), str(tmp_path / "talk.wav"), "--engines", *engines]
    bench.main(
        [*argv, "--threads", "1", "--repeats", "1", "--beams", "1", "2", "--compute", "fp32", "--max-new-tokens", "6"]
        + ["--batch-size", "2"]
    )
    rows = [cells(line) for line in capsys.readouterr().out.splitlines() if line.startswith("| talk.wav")]
    assert [(row[1], row[3]) for row in rows] == [
        (search, engine) for search in ("greedy", "beam 2") for engine in engines
    ]
    by = {(row[1], row[3]): row for row in rows}
    for search in ("greedy", "beam 2"):  # windows 2 at a time, each decoded as it is alone
        assert by[search, "encdec"][4] == by[search, "encdec-sequential"][4]
    assert windows > 2 and all(row[5] == str(windows) for row in rows)  # the same windows in every engine
    assert all(int(row[4]) > 0 and float(row[7]) > 0 for row in rows)  # tokens, audio seconds a wall second
    assert all(int(row[4]) <= 6 * windows for row in rows if row[3] == "encdec")  # --max-new-tokens a window
    # (transformers' short form re-runs a window after the timestamp tokens this random model writes: more tokens)
    # bf16 weights (what `encdec transcribe` decodes in on a CPU that multiplies bf16 natively) in both engines
    bench.main(
        [*argv[:3], "--engines", "encdec", "transformers", "--threads", "1", "--repeats", "1", "--beams", "1"]
        + ["--compute", "bf16", "--max-new-tokens", "6"]
    )
    rows = [cells(line) for line in capsys.readouterr().out.splitlines() if line.startswith("| talk.wav")]
    assert [(row[2], row[3]) for row in rows] == [("bf16", "encdec"), ("bf16", "transformers")]
    assert all(row[5] == str(windows) and int(row[4]) > 0 for row in rows)
    assert not bench.runs_in("transformers-batched", "int8") and bench.runs_in("transformers", "bf16")


def test_faster_whisper_takes_bf16_only_where_its_ctranslate2_offers_it_on_this_cpu():
    ctranslate2 = pytest.importorskip("ctranslate2")  # the `bench` extra, not in `all`
    bench = load_bench()
    has_bf16 = "bfloat16" in ctranslate2.get_supported_compute_types("cpu")
    assert bench.runs_in("faster-whisper", "bf16") == has_bf16 and bench.runs_in("faster-whisper-batched", "int8")


def test_each_engine_warms_up_on_as_many_windows_as_it_is_timed_decoding_at_once(tmp_path):
    import argparse

    bench = load_bench()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"max_source_positions": 1500}')  # Whisper's 30 s
    for engine, windows in (
        ("encdec", 8),
        ("encdec-sequential", 1),
        ("faster-whisper", 1),
        ("faster-whisper-batched", 8),
        ("transformers", 1),
        ("transformers-batched", 8),
    ):
        args = argparse.Namespace(model=tmp_path / "model", engine=engine, batch_size=8)
        assert bench.warm_up_samples(args) == windows * 30 * 16_000, engine
