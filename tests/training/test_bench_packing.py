"""benchmarks/bench_packing.py on the tiny config: the same losses padded and packed, packed rows fuller."""

import importlib.util
import re
import sys
from pathlib import Path

from encdec.training.run_config import load_config

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_packing.py"


def test_the_packing_benchmark_compares_the_same_steps(tiny_config, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("bench_packing", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["bench_packing", str(tiny_config), "--steps", "2", "--threads", "1"])
    overrides = ["objective.seq_len=512", "model.dropout=0"]  # whole stories to pack; no dropout: equal losses
    monkeypatch.setattr(bench, "load_config", lambda path: load_config(path, overrides))
    bench.main()
    out = capsys.readouterr().out
    rows = re.findall(r"^\s*(\d+)\s+(padded|packed)\s+(\d+) x \S+ \+ \S+\s+(\d\.\d{3})\s+(\d+\.\d{5})", out, re.M)
    assert len(rows) == 4, out
    for step in ("0", "1"):
        padded, packed = (next(r for r in rows if r[0] == step and r[1] == kind) for kind in ("padded", "packed"))
        assert padded[4] == packed[4]  # the same examples, the same loss
        assert int(packed[2]) < int(padded[2]) and float(packed[3]) > float(padded[3])  # fewer, fuller rows
