"""benchmarks/bench_serve.py at a toy shape: its workload from Multi30k and its table, one row per client
count and system."""

import gzip
import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TOY = dict(vocab_size=64, d_model=16, d_kv=4, num_heads=4, d_ff=32, num_layers=1, num_decoder_layers=1)


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_serve", BENCHMARKS / "bench_serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules["generate_systems"].SHAPES, "toy", TOY)
    return module


def test_the_workload_is_multi30k_in_sentencepiece_tokens_with_the_reference_lengths(bench, shared_data):
    import sentencepiece

    stream = bench.workload(shared_data, 64)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(shared_data / "tokenizers" / "mistral_tokenizer.model.v1"))
    with gzip.open(shared_data / "translation" / "multi30k" / "test_2016_flickr.de.gz", "rt") as f:
        first_german = f.readline().strip()
    assert len(stream) == 1000
    assert stream[0][1] == len(sp.encode(first_german)) + 1  # the reference's tokens and EOS
    assert all(2 <= int(t) < 64 for source, _ in stream for t in source[0])  # folded into the vocabulary


def test_a_toy_run_prints_every_system_for_every_client_count(bench, shared_data, capsys):
    argv = ["--shape", "toy", "--clients", "1,3", "--repeats", "1", "--no-ctranslate2", "--data", str(shared_data)]
    bench.main(argv)
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.split() and line.split()[0] in ("1", "3") and "/" not in line]
    assert [(r[0], r[1]) for r in rows] == [
        (c, s) for c in ("1", "3") for s in ("one-at-a-time", "static", "continuous")
    ]
    for row in rows:
        rps, tps, p50, p95, p99, peak = map(float, row[2:])
        assert rps > 0 and tps > rps and 0 < p50 <= p95 <= p99 and peak > 0
