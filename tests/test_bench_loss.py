"""benchmarks/bench_loss.py at a toy size: a row a vocabulary and way, both ways' cross-entropy the same."""

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
    assert [(r[0], r[1]) for r in rows] == [("50", "whole"), ("50", "chunked"), ("300", "whole"), ("300", "chunked")]
    assert rows[0][4] == rows[1][4] and rows[2][4] == rows[3][4]  # the cross-entropy, to 4 decimals
