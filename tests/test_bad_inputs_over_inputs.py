"""No command writes over one of its own inputs: every output (an OutputPath in the parser) is compared, once
the command line is read and before any work, with every input (an InputPath): the same path, the same file
through a symlink, a hard link or another spelling, a directory written that holds an input, or one already
inside an input directory, is refused in one sentence naming both, and nothing changes. An output of the other
kind (a directory where a file is written, a file where a directory is) is refused naming what it is.
"""

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_inputs_kit import one_sentence, passkey, snapshot

from encdec.cli import build_parser, main
from encdec.cli.output_paths import InputPath, OutputPath, check_apart
from encdec.errors import ConfigError
from encdec.safe_paths import output_dir, write_atomic

CORPUS = b"once upon a time there was a girl who liked cats.\n\nthe sun was hot and the dog ran far away.\n"


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A corpus, a test file, inputs, a config, a Hugging Face-like model directory, a tokenizer directory and a
    run (its latest pointer is what makes it one): nothing is read before the refusal, so no file needs to be
    real."""
    root = Path(os.path.realpath(tmp_path))
    (root / "corpus.txt").write_bytes(CORPUS)
    (root / "test.tsv").write_text("a dog runs\tein hund rennt\n")
    (root / "prompts.txt").write_text("a dog runs\n")
    (root / "tiny.yaml").write_text("model: {preset: t5-tiny}\n")
    (root / "hf").mkdir()
    (root / "hf" / "config.json").write_text("{}")
    (root / "tok").mkdir()
    (root / "tok" / "tokenizer.json").write_text("{}")
    (root / "run" / "checkpoints" / "step_00000002").mkdir(parents=True)
    (root / "run" / "checkpoints" / "latest").write_text("step_00000002\n")
    (root / "run" / "config.yaml").write_text("model: {}\n")
    return root


def symlinked(p: Path) -> str:
    (p / "story.txt").symlink_to(p / "corpus.txt")
    return str(p / "story.txt")


def hard_linked(p: Path) -> str:
    os.link(p / "corpus.txt", p / "copy.txt")
    return str(p / "copy.txt")


# the corpus as given, and the output as given: each names the same file
PASSKEY_OVER_ITS_CORPUS: dict[str, Callable[[Path], tuple[str, str]]] = {
    "the same path": lambda p: (str(p / "corpus.txt"), str(p / "corpus.txt")),
    "another spelling": lambda p: (str(p / "corpus.txt"), str(p / "tok" / ".." / "." / "corpus.txt")),
    "a relative path": lambda p: (str(p / "corpus.txt"), "corpus.txt"),
    "the corpus read through a symlink": lambda p: (symlinked(p), str(p / "corpus.txt")),
    "a hard link as --out": lambda p: (str(p / "corpus.txt"), hard_linked(p)),
    "a hard link as the corpus": lambda p: (hard_linked(p), str(p / "corpus.txt")),
}


@pytest.mark.parametrize("case", PASSKEY_OVER_ITS_CORPUS)
def test_passkey_never_writes_over_its_corpus(place, capsys, monkeypatch, case):
    monkeypatch.chdir(place)
    corpus, out = PASSKEY_OVER_ITS_CORPUS[case](place)
    before = snapshot(place)
    assert main(passkey(corpus, out)) == 2
    line = one_sentence(capsys)
    assert f"--out {out} is the same file as the corpus file {corpus}" in line, line
    assert snapshot(place) == before and (place / "corpus.txt").read_bytes() == CORPUS


def test_passkey_beside_its_corpus_is_written(place, capsys):
    assert main(passkey(str(place / "corpus.txt"), str(place / "keys.jsonl"))) == 0, capsys.readouterr().err
    assert (place / "keys.jsonl").read_text().count("\n") == 1 and (place / "corpus.txt").read_bytes() == CORPUS


def prepare(corpus: str, tokenizer: str, out: str) -> list[str]:
    return ["data", "prepare", corpus, "--format", "text", "--tokenizer", tokenizer, "--out", out]


# (command line, what its refusal says): each writes over one of its inputs
OVER_AN_INPUT: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "prepare: shards into the corpus's directory": (
        lambda p: prepare(str(p / "corpus.txt"), "byte", str(p)),
        "holds the corpus file",
    ),
    "prepare: shards into the tokenizer read": (
        lambda p: prepare(str(p / "corpus.txt"), str(p / "tok"), str(p / "tok")),
        "is the same directory as --tokenizer",
    ),
    "passkey: over a tokenizer's file": (
        lambda p: passkey(str(p / "corpus.txt"), str(p / "tok" / "tokenizer.json"), "--tokenizer", str(p / "tok")),
        "is tokenizer.json in --tokenizer",
    ),
    "generate: -o over -i": (
        lambda p: ["generate", str(p / "hf"), "-i", str(p / "prompts.txt"), "-o", str(p / "prompts.txt")],
        "-o {p}/prompts.txt is the same file as --input",
    ),
    "generate: -o over the model's config": (
        lambda p: ["generate", str(p / "hf"), "-i", str(p / "prompts.txt"), "-o", str(p / "hf" / "config.json")],
        "is config.json in the model",
    ),
    "export: a run over itself": (
        lambda p: ["export", str(p / "run"), "--out", str(p / "run")],
        "--out {p}/run is the same directory as the model",
    ),
    "export: into a run's checkpoints": (
        lambda p: ["export", str(p / "run"), "--out", str(p / "run" / "checkpoints" / "step_00000002"), "--force"],
        "lies inside the checkpoints of the run",
    ),
    "export: a model into its own directory": (
        lambda p: ["export", str(p / "hf"), "-o", str(p / "hf")],
        "is the same directory as the model",
    ),
    "average: a run over itself": (
        lambda p: ["average", str(p / "run"), "--last", "1", "--out", str(p / "run")],
        "is the same directory as the run",
    ),
    "evaluate: the report into the model directory": (
        lambda p: ["evaluate", str(p / "run"), "--data", str(p / "test.tsv"), "--out", str(p / "run")],
        "is the same directory as the model",
    ),
    "evaluate: the report into the test file's directory": (
        lambda p: ["evaluate", "org/name", "--data", str(p / "test.tsv"), "--out", str(p)],
        "holds --data",
    ),
    "evaluate: the report over the test file": (
        lambda p: ["evaluate", str(p / "hf"), "--data", str(p / "test.tsv"), "--out", str(p / "test.tsv")],
        "is a file",
    ),
    "attention: -o over a file of the model": (
        lambda p: ["attention", str(p / "hf"), "--source", "a dog", "-o", str(p / "hf" / "config.png")],
        "is config.png in the model",
    ),
    "train: the run directory holds the config": (
        lambda p: ["train", str(p / "run" / "config.yaml"), "--out", str(p / "run"), "--resume"],
        "holds the run config",
    ),
    "train: over the run's config": (
        lambda p: ["train", str(p / "tiny.yaml"), "--out", str(p / "tiny.yaml")],
        "is a file",
    ),
    "compare: the experiment directory holds a config": (
        lambda p: ["compare", str(p / "tiny.yaml"), "--out", str(p)],
        "holds the run config",
    ),
    "compare: the experiment directory holds the experiment": (
        lambda p: ["compare", "--experiment", str(p / "tiny.yaml"), "--out", str(p)],
        "holds --experiment",
    ),
}


@pytest.mark.parametrize("case", OVER_AN_INPUT)
def test_no_command_writes_over_one_of_its_inputs(place, capsys, case):
    build, says = OVER_AN_INPUT[case]
    (place / "hf" / "config.png").write_bytes(b"not a picture")
    before = snapshot(place)
    assert main(build(place)) == 2
    assert says.format(p=place) in one_sentence(capsys)
    assert snapshot(place) == before


# outputs beside their inputs, or where a command keeps its own, pass the check
APART: dict[str, Callable[[Path], list[str]]] = {
    "a picture in a run's directory": lambda p: ["attention", str(p / "run"), "--source", "a", "-o", str(p / "run" / "m.png")],
    "a report in a run's eval/": lambda p: ["evaluate", str(p / "run"), "--out", str(p / "run" / "eval" / "mine")],
    "an export beside the run": lambda p: ["export", str(p / "run"), "--out", str(p / "hf2")],
    "stdin to stdout": lambda p: ["generate", str(p / "hf"), "-i", "-", "-o", "-"],
    "a Hub id that names no directory": lambda p: ["generate", "org/name", "-o", str(p / "out.txt")],
    "a new file in a model directory": lambda p: ["generate", str(p / "hf"), "-o", str(p / "hf" / "new.txt")],
}  # fmt: skip


@pytest.mark.parametrize("case", APART)
def test_outputs_apart_from_the_inputs_are_let_through(place, monkeypatch, case):
    monkeypatch.chdir(place)
    (place / "run" / "eval" / "mine").mkdir(parents=True)
    (place / "run" / "m.png").write_bytes(b"an earlier picture")  # written again: it is the command's own
    argv = APART[case](place)
    parser = build_parser(argv)
    check_apart(parser, parser.parse_args(argv))


def output_options() -> list[tuple[str, argparse.Action]]:
    """(command, action) of every OutputPath option in the parser."""

    def walk(parser: argparse.ArgumentParser, command: str):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{command} {name}".strip())
            elif isinstance(action.type, OutputPath):
                yield command, action

    return list(walk(build_parser(), ""))


@pytest.mark.parametrize("command, action", output_options(), ids=lambda x: getattr(x, "dest", x))
def test_an_output_of_the_other_kind_is_refused_naming_what_it_is(place, command, action):
    """A directory where a file is written says it is a directory (not a temporary file's name); a file where
    a directory is written says it is a file."""
    output = action.type
    wrong = place / ("corpus.txt" if output.directory else "tok")
    with pytest.raises(ConfigError) as refused:
        output(str(wrong))
    said = str(refused.value)
    assert said.startswith(f"{output.flag} {wrong} is {'a file' if output.directory else 'a directory'}; name ")
    assert ".tmp" not in said


def test_passkey_out_a_directory_says_so(place, capsys):
    assert main(passkey(str(place / "corpus.txt"), str(place / "tok"))) == 2
    assert one_sentence(capsys) == f"encdec: error: --out {place / 'tok'} is a directory; name the jsonl file to write"


def test_every_path_argument_is_declared_an_input_or_an_output():
    """A path given as a plain `type=Path` would escape the check: each is an InputPath or an OutputPath."""

    def walk(parser: argparse.ArgumentParser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)
            else:
                yield action

    plain = [action.dest for action in walk(build_parser()) if action.type is Path]
    assert plain == []
    inputs = {action.dest for action in walk(build_parser()) if isinstance(action.type, InputPath)}
    assert {"model", "model_dir", "inputs", "config", "data", "input", "run", "tokenizer"} <= inputs


def test_the_safe_writers_name_a_directory_or_a_file_of_the_wrong_kind(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("mine")
    with pytest.raises(ConfigError, match=r"/d is a directory; encdec writes a file there"):
        write_atomic(tmp_path / "d", "x")
    with pytest.raises(ConfigError, match=r"--out .*/f is not a directory"):
        output_dir(tmp_path / "f", "--out")
    assert (tmp_path / "f").read_text() == "mine" and list((tmp_path / "d").iterdir()) == []
