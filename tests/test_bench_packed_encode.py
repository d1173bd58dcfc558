"""benchmarks/bench_packed_encode.py at t5-tiny: both ways timed on the same joins, the packed one in fewer rows,
their outputs equal."""

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.bench_kit import assert_refused_in_one_sentence

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_packed_encode.py"


def test_the_table_has_a_row_a_join_with_fewer_rows_packed_and_equal_outputs(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("bench_packed_encode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["bench", "--preset", "t5-tiny", "--sources", "4,48", "--repeats", "1"])
    bench.main()
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| 4")]
    assert [row[0].strip() for row in rows] == ["4", "48"]
    assert [int(row[2]) for row in rows] == [4, 48] and int(rows[1][3]) < 48
    assert all(float(row[7]) < 1e-4 for row in rows)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--sources", "0"),
        ("--sources", "4,x"),
        ("--sources", str(1 << 40)),
        ("--repeats", "0"),
        ("--preset", "t5-huge"),
    ],
)
def test_a_bad_argument_is_one_sentence(flag, value, capsys):
    assert_refused_in_one_sentence("bench_packed_encode", [flag, value], flag, capsys)
