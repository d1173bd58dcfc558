"""benchmarks/bench_speculative.py at a toy scale: its table, speculative greedy equal to plain greedy throughout, at
batch 1 and in batches."""

import importlib.util

import pytest
from hf_kit import word_level_t5

from tests.bench_kit import BENCHMARKS, assert_refused_in_one_sentence

pytest.importorskip("transformers")
WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was little girl named lily she liked to play".split()


def test_the_table_has_plain_greedy_and_each_k_with_outputs_equal_to_plain(monkeypatch, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_speculative", BENCHMARKS / "bench_speculative.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    target = word_level_t5(tmp_path / "target", WORDS, num_layers=2)
    draft = word_level_t5(tmp_path / "draft", WORDS, num_layers=1)
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\nlily liked to play\nshe was a little girl\n")
    capsys.readouterr()
    args = [
        str(target),
        str(draft),
        "--shares-encoder",
        "--inputs",
        str(inputs),
        "--num-assistant-tokens",
        "2,4",
        "--draft-quantize",
        "int8",
    ]
    bench.main([*args, "--max-new-tokens", "8", "--repeats", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 sentences of inputs.txt, batch 1, greedy")
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines[3:]}
    assert set(rows) == {"plain greedy", "speculative k=2", "speculative k=4"}
    assert all(row[-1].strip("| ") == "1.00" for row in rows.values())  # every output plain greedy's
    assert rows["plain greedy"][2] == "1.00x"
    bench.main([*args, "--max-new-tokens", "8", "--repeats", "1", "--batch-size", "2"])  # rows of their own counts
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 sentences of inputs.txt, batch 2, greedy")
    assert all(line.split(" | ")[-1].strip("| ") == "1.00" for line in lines[3:])


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--num-assistant-tokens", "3,0"),
        ("--num-assistant-tokens", "65"),
        ("--sentences", "0"),
        ("--batch-size", "-2"),
        ("--batch-size", str(1 << 40)),
        ("--max-new-tokens", "x"),
        ("--repeats", "0"),
        ("--threads", "0"),
    ],
)
def test_a_number_out_of_its_range_is_one_sentence(flag, value, capsys):
    assert_refused_in_one_sentence("bench_speculative", ["target", "draft", flag, value], flag, capsys)
