"""Data whose examples hold no text, or a line of more columns than a format reads, is refused in one sentence
(issue 56): a jsonl-pairs file of empty pairs would train on EOS alone, a TSV's third column would be dropped.
A few empty examples among real ones are skipped and counted."""

import json
import logging

import pytest
import yaml
from bad_inputs_kit import progress

from encdec.cli import main
from encdec.data.formats import read_corpus
from encdec.errors import DataError

EMPTY_PAIR = json.dumps({"dialogue": "", "summary": ""}) + "\n"
PAIR = json.dumps({"dialogue": "#Person1#: Hello there.", "summary": "A greeting."}) + "\n"


def one_sentence(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("encdec: error: "), err
    return lines[0]


def train_config(tmp_path, data: dict) -> str:
    values = {
        "model": {"preset": "t5-tiny"},
        "tokenizer": {"kind": "byte", "num_sentinels": 8},
        "data": data,
        "objective": {"kind": "seq2seq", "max_source_len": 32, "max_target_len": 16},
        "training": {"steps": 1, "batch_size": 2, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 1, "steps": 1},
        "output": {"plot": False},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def test_a_file_of_empty_pairs_is_refused_as_holding_no_examples(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text(EMPTY_PAIR * 100)
    with pytest.raises(DataError, match=r"empty\.jsonl holds no examples: its 100 pairs all have an empty source"):
        list(read_corpus("jsonl-pairs", [path]))


@pytest.mark.parametrize(
    "fmt, text",
    [
        ("tsv", "words\t\n\twords\n"),
        ("jsonl", json.dumps({"text": " "}) + "\n"),
        ("jsonl-pairs", json.dumps({"dialogue": "words", "summary": ""}) + "\n"),
    ],
)
def test_every_format_refuses_a_file_whose_examples_are_all_empty(tmp_path, fmt, text):
    path = tmp_path / "data.txt"
    path.write_text(text)
    with pytest.raises(DataError, match="holds no examples"):
        list(read_corpus(fmt, [path]))


def test_a_few_empty_pairs_among_real_ones_are_skipped_and_counted(tmp_path, caplog):
    path = tmp_path / "some.jsonl"
    path.write_text(PAIR * 5 + EMPTY_PAIR * 2)
    with caplog.at_level(logging.WARNING, logger="encdec.data.corpora"):
        pairs = list(read_corpus("jsonl-pairs", [path]))
    assert pairs == [("#Person1#: Hello there.", "A greeting.")] * 5
    assert "2 of its 7 pairs have an empty source or target, skipped" in caplog.text
    with caplog.at_level(logging.WARNING, logger="encdec.data.corpora"):
        list(read_corpus("jsonl-pairs", [path]))  # a streamed corpus's next pass: said once is enough
    assert caplog.text.count("2 of its 7 pairs") == 1


def test_training_on_empty_pairs_is_one_sentence_and_writes_no_run(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text(EMPTY_PAIR * 100)
    config = train_config(tmp_path, {"format": "jsonl-pairs", "train": [str(tmp_path / "empty.jsonl")]})
    code = main(["train", config, "--out", str(tmp_path / "run")])
    line = one_sentence(code, capsys.readouterr().err)
    assert line.endswith("empty.jsonl holds no examples: its 100 pairs all have an empty source or target"), line
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("header", [False, True])
def test_a_tsv_line_of_a_third_column_is_refused_naming_it(tmp_path, header):
    path = tmp_path / "pairs.tsv"
    path.write_text("source\ttarget\tlanguage\n" + "a cat\tune chatte\tfr\n" * 3)
    with pytest.raises(DataError, match=r"pairs\.tsv line 1 has 3 tab-separated columns where format tsv reads 2, "):
        list(read_corpus("tsv", [path], header=header))


def test_a_tsv_row_of_more_columns_than_its_header_is_refused(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("source\ttarget\n" + "a cat\tune chatte\n" + "a dog\tun chien\tfr\n")
    with pytest.raises(DataError, match=r"line 3 has 3 tab-separated columns .* column 3 \('fr'\) would be lost"):
        list(read_corpus("tsv", [path], header=True))


def test_a_tsv_line_of_one_column_is_refused_and_a_trailing_tab_loses_nothing(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a cat\tune chatte\t\nalone\n")
    with pytest.raises(DataError, match=r"line 2 has 1 tab-separated column; 2 are needed"):
        list(read_corpus("tsv", [path]))
    path.write_text("a cat\tune chatte\t\n")
    assert list(read_corpus("tsv", [path])) == [("a cat", "une chatte")]


def test_training_on_a_three_column_tsv_with_header_is_one_sentence(tmp_path, capsys):
    (tmp_path / "pairs.tsv").write_text("source\ttarget\tlanguage\n" + "a cat\tune chatte\tfr\n" * 20)
    data = {"format": "tsv", "train": [str(tmp_path / "pairs.tsv")], "header": True}
    code = main(["train", train_config(tmp_path, data), "--out", str(tmp_path / "run")])
    line = one_sentence(code, capsys.readouterr().err)
    assert "pairs.tsv line 1 has 3 tab-separated columns" in line and "column 3 ('language') would be lost" in line


def test_data_prepare_refuses_a_three_column_tsv_with_header(tmp_path, capsys):
    (tmp_path / "pairs.tsv").write_text("source\ttarget\tlanguage\n" + "a cat\tune chatte\tfr\n" * 5)
    argv = ["data", "prepare", str(tmp_path / "pairs.tsv"), "--format", "tsv", "--header"]
    code = main([*argv, "--tokenizer", "byte", "--out", str(tmp_path / "shards")])
    assert "column 3 ('language') would be lost" in one_sentence(code, capsys.readouterr().err)
