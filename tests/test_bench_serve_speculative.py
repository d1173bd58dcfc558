"""benchmarks/bench_serve_speculative.py at a toy scale: a row per client count, plain and speculative side by side,
the speculative outputs plain continuous batching's throughout."""

import importlib.util

import pytest
from hf_kit import word_level_t5

from tests.bench_kit import BENCHMARKS, assert_refused_in_one_sentence

pytest.importorskip("transformers")
WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was little girl named lily she liked to play".split()


def test_the_table_has_each_client_count_with_outputs_equal_to_plain(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_serve_speculative", BENCHMARKS / "bench_serve_speculative.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    target = word_level_t5(tmp_path / "target", WORDS, num_layers=2)
    draft = word_level_t5(tmp_path / "draft", WORDS, num_layers=1)
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\nlily liked to play\nshe was a little girl\nthere was a girl named lily\n")
    capsys.readouterr()
    args = [str(target), str(draft), "--shares-encoder", "--inputs", str(inputs), "--clients", "1,3"]
    bench.main([*args, "--num-assistant-tokens", "2", "--max-new-tokens", "8", "--repeats", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("4 requests of inputs.txt a round, greedy, k = 2")
    rows = [line.strip("| ").split(" | ") for line in lines[3:5]]
    assert [row[0] for row in rows] == ["1", "3"]
    assert all(row[-1] == "1.00" for row in rows)  # every output plain continuous batching's
    assert all(float(row[4]) >= 1.0 and 0.0 <= float(row[5]) <= 1.0 for row in rows[:2])  # tokens a round, accepted
    costs = [line.strip("| ").split(" | ") for line in lines[-2:]]  # the step costs at 1 and 3 rows
    assert [row[0] for row in costs] == ["1", "3"] and all(float(x) > 0 for row in costs for x in row[1:])


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--clients", "1,0"),
        ("--clients", "1,x"),
        ("--num-assistant-tokens", "65"),
        ("--sentences", "0"),
        ("--max-new-tokens", str(1 << 40)),
        ("--repeats", "-1"),
        ("--threads", "0"),
    ],
)
def test_a_number_out_of_its_range_is_one_sentence(flag, value, capsys):
    assert_refused_in_one_sentence("bench_serve_speculative", ["target", "draft", flag, value], flag, capsys)
