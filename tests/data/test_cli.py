import argparse

import pytest

from encdec.cli import data as data_cli
from encdec.errors import EncdecError


def run(argv: list[str]) -> int:
    """Parse and run like `encdec`, turning user errors into exit code 2 (as encdec.cli.main does)."""
    parser = argparse.ArgumentParser(prog="encdec")
    data_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except EncdecError as error:
        print(f"encdec: error: {error}")
        return 2


def prepare(sources: list, out, options: str) -> int:
    """`encdec data prepare SOURCES --out OUT` with `options` as a shell splits them."""
    return run(["data", "prepare", *map(str, sources), "--out", str(out), *options.split()])


def inspect(shards, options: str) -> int:
    """`encdec data inspect SHARDS` with `options` as a shell splits them."""
    return run(["data", "inspect", str(shards), *options.split()])


@pytest.fixture
def stories(tmp_path):
    path = tmp_path / "stories.txt"
    path.write_text(
        "<|endoftext|>\n".join(f"Story {i}: the cat sat on the mat and looked at the sun.\n" for i in range(40))
    )
    return path


def test_prepare_then_inspect_shows_input_beside_target(tmp_path, stories, capsys):
    out = tmp_path / "shards"
    assert prepare([stories], out, "--format tinystories --tokenizer byte --mode-tokens --workers 1") == 0
    assert "train] text: 40 documents" in capsys.readouterr().out
    assert inspect(out, "--objective ul2 -n 2 --max-length 48 --mode-tokens --width 100") == 0
    printed = capsys.readouterr().out
    assert printed.count("--- example") == 2
    assert "INPUT" in printed and " | TARGET" in printed and "</s>" in printed


@pytest.mark.parametrize("objective", ["span", "causal", "prefix"])
def test_inspect_runs_every_text_objective(tmp_path, stories, objective, capsys):
    out = tmp_path / "shards"
    prepare([stories], out, "--format tinystories --tokenizer byte --workers 1")
    assert inspect(out, f"--objective {objective} -n 1 --max-length 40 --block-size 16") == 0
    assert "--- example 0" in capsys.readouterr().out


def test_prepare_trains_a_bpe_tokenizer_from_raw_pairs_and_inspects_seq2seq(tmp_path, capsys):
    (tmp_path / "a.en").write_text("".join(f"a dog runs {i}\n" for i in range(30)))
    (tmp_path / "a.de").write_text("".join(f"ein Hund rennt {i}\n" for i in range(30)))
    out = tmp_path / "pairs"
    sources = [tmp_path / "a.en", tmp_path / "a.de"]
    assert (
        prepare(sources, out, "--format parallel --tokenizer bpe --vocab-size 400 --num-sentinels 4 --workers 1") == 0
    )
    assert inspect(out, "--objective seq2seq -n 2") == 0
    assert "ein Hund rennt" in capsys.readouterr().out


def test_bad_input_is_one_sentence_and_exit_code_2(tmp_path, stories, capsys):
    assert inspect(tmp_path / "missing", "") == 2
    assert "has no manifest.json" in capsys.readouterr().out
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert prepare([empty], tmp_path / "o", "--format text --tokenizer byte --workers 1") == 2
    assert "empty.txt contains no text" in capsys.readouterr().out
    assert prepare([stories], tmp_path / "o", "--format text --tokenizer wordpiece") == 2
    assert "neither a kind" in capsys.readouterr().out
