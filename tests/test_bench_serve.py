"""benchmarks/bench_serve.py at a toy shape: its workload from Multi30k and its table, one row per client
count and system."""

import contextlib
import gzip
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.bench_kit import load_benchmark


@pytest.fixture
def bench(monkeypatch):
    return load_benchmark(monkeypatch, "bench_serve")


def test_the_workload_is_multi30k_in_sentencepiece_tokens_with_the_reference_lengths(bench, shared_data):
    import sentencepiece

    stream = bench.workload(shared_data, 64)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(shared_data / "tokenizers" / "mistral_tokenizer.model.v1"))
    with gzip.open(shared_data / "translation" / "multi30k" / "test_2016_flickr.de.gz", "rt") as f:
        first_german = f.readline().strip()
    assert len(stream) == 1000
    assert stream[0][1] == len(sp.encode(first_german)) + 1  # the reference's tokens and EOS
    assert all(2 <= int(t) < 64 for source, _ in stream for t in source[0])  # folded into the vocabulary


def test_a_toy_run_prints_every_system_for_every_client_count_and_the_step_at_every_row_count(
    bench, shared_data, capsys
):
    argv = ["--shape", "toy", "--clients", "1,3", "--rows", "2,5", "--repeats", "1", "--no-ctranslate2"]
    bench.main([*argv, "--data", str(shared_data)])
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.split() and line.split()[0] in ("1", "3") and "/" not in line]
    assert [(r[0], r[1]) for r in rows] == [
        (c, s) for c in ("1", "3") for s in ("one-at-a-time", "static", "continuous")
    ]
    for row in rows:
        rps, tps, p50, p95, p99, peak = map(float, row[2:])
        assert rps > 0 and tps > rps and 0 < p50 <= p95 <= p99 and peak > 0
    start = next(i for i, line in enumerate(lines) if line.startswith("a step at R rows"))
    table = {row[0]: row[1:] for row in map(str.split, lines[start + 2 : -2])}
    assert list(table) == ["2", "5"]
    for cells in table.values():  # continuous's host ms, forward ms and steps at R rows, then static's, the choice
        for host, forward, count in (cells[:3], cells[3:6]):
            assert float(host) > 0 and float(forward) > 0 and int(count) > 0
        # a static batch takes its every step at R rows; the continuous batch has all R rows from the last join,
        # which a loaded machine delays by as many steps as its threads wait (48 of 96 under the suite's load)
        assert int(cells[5]) > bench.STEP_TOKENS // 2
        assert float(cells[6]) > 0
    assert lines[-2].startswith("continuous host time less the token choice: most / least")
    assert lines[-1].startswith("continuous host time: most / least over the row counts")


NUMBERS = {"--clients": (1, 4096), "--rows": (1, 4096), "--repeats": (1, 100), "--threads": (1, 1024)}


@settings(max_examples=100, deadline=None)
@given(flag=st.sampled_from(sorted(NUMBERS)), value=st.one_of(st.integers(-(10**12), 10**12).map(str), st.text()))
def test_every_number_is_taken_within_its_range_or_refused_in_one_line(flag, value):
    bench = load_benchmark(pytest.MonkeyPatch(), "bench_serve")
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = bench.parse_args([f"{flag}={value}"])  # "=": a value that begins with "-" is still its value
    except SystemExit as stop:
        lines = errors.getvalue().strip().splitlines()  # argparse's usage, then the one sentence
        assert stop.code == 2 and lines[0].startswith("usage:") and sum("error" in line for line in lines) == 1
        assert f": error: argument {flag}: {flag} must be" in lines[-1]
        return
    low, high = NUMBERS[flag]
    number = getattr(args, flag[2:])
    assert all(low <= n <= high for n in (number if isinstance(number, list) else [number]))


def test_a_data_folder_without_multi30k_is_refused_in_one_line(bench, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--data", str(tmp_path)])
    assert "no Multi30k test sentences and Mistral tokenizer there" in capsys.readouterr().err
