"""Loading a script of benchmarks/ for its tests, with generate_systems' toy shape added."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TOY = dict(vocab_size=64, d_model=16, d_kv=4, num_heads=4, d_ff=32, num_layers=1, num_decoder_layers=1)


def load_benchmark(monkeypatch, name: str):
    """benchmarks/<name>.py as a module (benchmarks/ on the path for its imports), with SHAPES["toy"] = TOY."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules["generate_systems"].SHAPES, "toy", TOY)
    return module


def assert_refused_in_one_sentence(name: str, argv: list[str], flag: str, capsys) -> None:
    """benchmarks/<name>.py's parse_args(argv) exits 2 with one argparse sentence naming `flag`, no traceback."""
    import pytest

    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert ": error: " in err[-1] and flag in err[-1] and not any("Traceback" in line for line in err)
