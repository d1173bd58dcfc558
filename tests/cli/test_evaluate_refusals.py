"""`encdec evaluate MODEL --data FILE` refuses bad input in one sentence, exit 2, before it loads a model or writes."""

import os
from pathlib import Path

import pytest

from encdec.cli import main

TSV = "once upon a time\tthere was a girl\n"


@pytest.fixture
def place(tmp_path) -> Path:
    """A Hugging Face directory (its config.json is all the refusals read), a TSV test file and a JSON-lines one."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "t5"}')
    (tmp_path / "test.tsv").write_text(TSV)
    (tmp_path / "test.jsonl").write_text('{"text": "once upon a time"}\n')
    return tmp_path


def hf(place: Path, *options: str, data: str = "test.tsv", out: str | None = "report") -> list[str]:
    """evaluate the Hugging Face directory on `data` into `out` (None: no --out), with `options`."""
    where = ["--out", str(place / out)] if out else []
    return ["evaluate", str(place / "hf"), "--data", str(place / data), *where, *options]


def symlinked_report(place: Path) -> list[str]:
    (place / "report").mkdir()
    os.symlink(place / "test.tsv", place / "report" / "eval.json")
    return hf(place)


CASES = {  # name -> (arguments made in the case's place, what the sentence says)
    "a missing --data file": (lambda p: hf(p, data="missing.tsv"), "missing.tsv does not exist"),
    "an unknown --format": (lambda p: hf(p, "--format", "csv"), "argument --format: invalid choice: 'csv'"),
    "a TSV read as JSON lines": (lambda p: hf(p, "--format", "jsonl-pairs"), "line 1 is not valid JSON"),
    "no --out for a Hugging Face model": (lambda p: hf(p, out=None), "--out DIR is needed to evaluate"),
    "no --data for a Hugging Face model": (
        lambda p: ["evaluate", str(p / "hf"), "--out", str(p / "report")],
        "has no validation split: give --data FILE",
    ),
    "a .jsonl without --format": (lambda p: hf(p, data="test.jsonl"), "--format is needed"),
    "a jsonl option for a TSV": (lambda p: hf(p, "--source-field", "en"), "--source-field applies to --format"),
    "--out inside the model directory": (lambda p: hf(p, out="hf/eval"), "lies inside"),
    "--out is a file": (lambda p: hf(p, out="test.jsonl"), "is a file"),
    "parallel with one file": (lambda p: hf(p, "--format", "parallel"), "parallel takes two files"),
    "three --data files": (
        lambda p: ["evaluate", str(p / "hf"), "--data", *[str(p / "test.tsv")] * 3, "--out", str(p / "report")],
        "--data takes one file, or two",
    ),
    "--batches with --data": (lambda p: hf(p, "--batches", "3"), "--batches counts batches"),
    "a symlinked report file": (symlinked_report, "is a symlink"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_bad_evaluate_is_one_sentence_and_writes_nothing(place, capsys, name):
    build, says = CASES[name]
    argv = build(place)
    before = sorted(str(p) for p in place.rglob("*"))
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("encdec: error: "), captured.err
    assert says in lines[0] and len(lines[0]) < 300 and "Traceback" not in captured.err
    assert captured.out == ""
    assert sorted(str(p) for p in place.rglob("*")) == before  # no report directory, nothing in the model's
