"""Passkey examples (encdec.data.passkey, `encdec data passkey`): a source of the asked length in the
tokenizer's tokens, TinyStories' sentences around one needle at the asked depth, the question last, the key
the target; a grid of lengths and depths or depths drawn; the file reads as jsonl pairs; bad options refused."""

import json
import random

import pytest

from encdec.cli import main
from encdec.data.corpora import iter_tinystories
from encdec.data.formats import read_corpus
from encdec.data.passkey import NEEDLE, QUESTION, passkey_example, passkey_examples, sentences, word_keys
from encdec.errors import DataError
from encdec.tokenizers import build_tokenizer
from tests.data.test_cli import run


@pytest.fixture(scope="module")
def count_tokens(mistral_model):
    tokenizer = build_tokenizer("sentencepiece", mistral_model, num_sentinels=0)
    return lambda text: len(tokenizer.encode(text))


@pytest.mark.parametrize("depth", [0.0, 0.3, 0.75, 1.0])
def test_an_example_has_the_asked_length_and_its_needle_at_the_asked_depth(tinystories_path, count_tokens, depth):
    stories = iter_tinystories(tinystories_path)
    example = passkey_example(sentences(stories), count_tokens, 1024, depth, random.Random(0))
    key, source = example["target"], example["source"]
    assert len(key) == 5 and key.isdigit() and len(set(key)) == 5  # no digit twice
    assert 1024 - 60 <= example["length"] == count_tokens(source) <= 1024 + 8  # cut at a sentence end
    assert source.count(key) == 2 and source.endswith(QUESTION)
    needle = source.index(NEEDLE.format(key=key))
    before = count_tokens(source[:needle]) if needle else 0
    assert abs(before / example["length"] - depth) < 0.05  # the sentence end nearest the depth
    assert abs(example["depth"] - depth) < 0.05


def test_a_grid_gives_each_cell_and_drawn_depths_spread(tinystories_path, count_tokens):
    grid = list(passkey_examples(iter_tinystories(tinystories_path), count_tokens, [256, 512], [0, 0.5, 1], 3))
    asked = [(n, d) for n in (256, 512) for d in (0, 0.5, 1) for _ in range(3)]
    assert len(grid) == len(asked)
    assert all(n - 60 <= e["length"] <= n + 8 and abs(e["depth"] - d) < 0.1 for e, (n, d) in zip(grid, asked))
    assert len({e["target"] for e in grid}) == len(grid)  # keys drawn afresh
    assert len({e["source"][:200] for e in grid}) == len(grid)  # the haystack moves on through the corpus
    drawn = list(passkey_examples(iter_tinystories(tinystories_path), count_tokens, [256], None, 60, seed=3))
    depths = sorted(e["depth"] for e in drawn)
    assert depths[5] < 0.25 and depths[-5] > 0.75


def test_a_haystack_longer_than_its_corpus_goes_round_it(count_tokens):
    example = passkey_example(sentences(["One cat sat. It slept."]), count_tokens, 256, 0.5, random.Random(1))
    assert example["source"].count("One cat sat.") > 10 and 200 < example["length"] <= 256
    with pytest.raises(DataError, match="no documents"):
        passkey_example(sentences([]), count_tokens, 256, 0.5, random.Random(1))
    with pytest.raises(DataError, match="no room"):
        passkey_example(sentences(["One cat sat."]), count_tokens, 30, 0.5, random.Random(1))


def test_the_command_writes_pairs_that_train_as_jsonl_pairs(tmp_path, tinystories_path, mistral_model, capsys):
    out = tmp_path / "passkey.jsonl"
    argv = ["data", "passkey", str(tinystories_path), "--out", str(out), "--tokenizer", "sentencepiece"]
    argv += ["--tokenizer-path", str(mistral_model), "--lengths", "128,256", "--depths", "0,1", "--per-cell", "2"]
    assert run(argv) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 8 and {e["depth"] for e in lines} == {0.0, 1.0}
    pairs = list(read_corpus("jsonl-pairs", [out], source_field="source", target_field="target"))
    assert pairs == [(e["source"], e["target"]) for e in lines]
    assert "8 passkey examples" in capsys.readouterr().out
    assert run(argv + ["--digits", "2", "--seed", "1"]) == 0
    keys = [json.loads(line)["target"] for line in out.read_text().splitlines()]
    assert all(len(key) == 2 and key.isdigit() and key[0] != key[1] for key in keys)


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--lengths", "32"], "--lengths"),
        (["--lengths", "256", "--depths", "1.5"], "--depths"),
        (["--lengths", "256", "--per-cell", "0"], "--per-cell"),
        (["--lengths", "256", "--digits", "11"], "--digits"),
        (["--lengths", "1000000", "--per-cell", "1000"], "at most"),
        (["--lengths", "256", "--format", "jsonl-pairs"], "--format"),
    ],
)
def test_bad_options_are_one_sentence(tmp_path, tinystories_path, flags, says, capsys):
    argv = ["data", "passkey", str(tinystories_path), "--out", str(tmp_path / "p.jsonl"), "--tokenizer", "byte"]
    assert main(argv + flags) == 2
    captured = capsys.readouterr()
    assert says in captured.out + captured.err and "Traceback" not in captured.err
    assert not (tmp_path / "p.jsonl").exists()


def test_word_keys_are_one_token_words_the_same_for_every_file(tmp_path, tinystories_path, mistral_model):
    tokenizer = build_tokenizer("sentencepiece", mistral_model, num_sentinels=0)
    pieces = [tokenizer.decode([i]) for i in range(tokenizer.vocab_size)]
    keys = word_keys(pieces)
    assert len(keys) == 1000 and keys == word_keys(pieces) and keys != word_keys(pieces, seed=1)
    assert all(key.isalpha() and key.islower() and 5 <= len(key) <= 12 for key in keys)
    with pytest.raises(DataError, match="no one-token word"):
        word_keys(["a", "b", "<s>"])
    files = []
    for seed in (1, 2):
        out = tmp_path / f"words{seed}.jsonl"
        argv = ["data", "passkey", str(tinystories_path), "--out", str(out), "--tokenizer", "sentencepiece"]
        argv += ["--tokenizer-path", str(mistral_model), "--lengths", "128", "--per-cell", "40", "--keys", "words"]
        assert run(argv + ["--seed", str(seed)]) == 0
        files.append([json.loads(line) for line in out.read_text().splitlines()])
    for examples in files:
        for example in examples:
            key = example["target"]
            assert key in keys and len(tokenizer.encode(key)) == 1
            assert NEEDLE.format(key=key) in example["source"]
    assert {e["target"] for e in files[0]} != {e["target"] for e in files[1]}  # drawn from the one list


def test_its_help_offers_only_the_reader_options_its_text_formats_take(capsys):
    """--format takes text formats alone: no pair fields, target lists or TSV header are offered (issue 58)."""
    with pytest.raises(SystemExit):
        main(["data", "passkey", "--help"])
    said = capsys.readouterr().out
    assert "--text-field" in said
    assert not any(flag in said for flag in ("--source-field", "--target-field", "--target-list", "--header"))
