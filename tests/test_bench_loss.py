"""benchmarks/bench_loss.py at a toy size: a row a vocabulary and way, every way's cross-entropy the same."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_loss.py"


def test_the_table_has_both_ways_at_each_vocabulary_with_the_same_loss(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("bench_loss", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    toy = ["--vocab", "50,300", "--rows", "40", "--width", "8", "--steps", "1", "--chunk", "600"]
    monkeypatch.setattr(sys, "argv", ["bench", *toy])
    bench.main()
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    ways = ["whole", "recomputed", "formed"]
    assert [(r[0], r[1]) for r in rows] == [(v, w) for v in ("50", "300") for w in ways]
    assert len({r[4] for r in rows[:3]}) == len({r[4] for r in rows[3:]}) == 1  # the cross-entropy, to 4 decimals


def test_numbers_out_of_their_range_are_one_line_each(monkeypatch, capsys):
    import pytest

    spec = importlib.util.spec_from_file_location("bench_loss", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for flag, value in (("--rows", "0"), ("--vocab", "50,x"), ("--steps", "1000"), ("--chunk", "2e40")):
        monkeypatch.setattr(sys, "argv", ["bench", flag, value])
        with pytest.raises(SystemExit) as stopped:
            bench.main()
        error = capsys.readouterr().err.strip().splitlines()
        assert stopped.value.code == 2 and flag in error[-1] and "Traceback" not in "\n".join(error)
