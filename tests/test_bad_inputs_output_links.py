"""No output goes through a symlink: every option that names what a command writes is found in the parser
and walked with a symlinked directory somewhere on its path, and refused in one sentence with nothing made
where the link leads; with the command line's own check switched off, the writer behind it refuses alike.

The rule (encdec.safe_paths): no component of an output path may be a symlink, whether it exists or is
still to be made, except the system's own (an entry of the file-system root, the home directory and the
directories above it).
"""

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from bad_inputs_kit import one_sentence, passkey, snapshot, tiny

from encdec.cli import build_parser, main
from encdec.cli.output_paths import OutputPath
from encdec.errors import ConfigError
from encdec.safe_paths import atomic_path, open_replacing, output_dir, output_path, staged_files, write_atomic

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = tiny(
    model={"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0},
    output={"save_interval": 2, "keep_last": 3, "plot": False, "tensorboard": False},
)
OUTPUT_FLAGS = {"--out", "-o", "--output"}  # the names an output option goes by: each must be an OutputPath


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """Made once: the tiny config (a T5 layout, so it exports), a run trained 4 steps (checkpoints 2 and 4), a
    corpus, a test file and inputs."""
    root = tmp_path_factory.mktemp("output_links")
    (root / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    argv = ["train", str(root / "tiny.yaml"), "--out", str(root / "run"), "--set", "training.steps=4"]
    assert main(argv) == 0
    (root / "corpus.txt").write_text("once upon a time\n\nthere was a girl\n")
    (root / "test.tsv").write_text("a dog runs\tein hund rennt\nthe sun\tdie sonne\n")
    (root / "inputs.txt").write_text("a dog runs\nthe sun\n")
    whisper(root)
    return root


def whisper(root: Path) -> None:
    """A tiny random Whisper (with the byte tokenizer) and a second of a 440 Hz tone, for `transcribe`."""
    import numpy as np
    import soundfile
    import transformers

    from encdec.interop.hf_tokenizer import convert_tokenizer
    from encdec.tokenizers import build_tokenizer
    from tests.generation import whisper_kit

    whisper_kit.tiny_whisper(transformers, root / "whisper")
    convert_tokenizer(build_tokenizer("byte")).save(root / "whisper")
    soundfile.write(root / "tone.wav", 0.1 * np.sin(np.arange(16_000) * 2 * np.pi * 440 / 16_000), 16_000)


# What each writer is run with: (the command line writing `out`, the name `out` ends in). A new option that
# names an output needs its line here, or test_every_output_option_is_found_and_has_a_command_line fails.
Writer = Callable[[Path, str], list[str]]
WRITERS: dict[tuple[str, str], tuple[Writer, str]] = {
    ("train", "--out"): (lambda lib, out: ["train", str(lib / "tiny.yaml"), "--out", out], "run"),
    ("compare", "--out"): (
        lambda lib, out: ["compare", str(lib / "tiny.yaml"), "--out", out, "--set", "training.steps=2"],
        "experiment",
    ),
    ("export", "--out"): (lambda lib, out: ["export", str(lib / "run"), "--out", out], "hf"),
    ("average", "--out"): (lambda lib, out: ["average", str(lib / "run"), "--last", "2", "--out", out], "avg"),
    ("evaluate", "--out"): (
        lambda lib, out: [
            "evaluate",
            str(lib / "run"),
            "--data",
            str(lib / "test.tsv"),
            "--out",
            out,
            "--max-new-tokens",
            "4",
            "--device",
            "cpu",
        ],
        "report",
    ),  # fmt: skip
    ("generate", "--output"): (
        lambda lib, out: [
            "generate",
            str(lib / "run"),
            "--input",
            str(lib / "inputs.txt"),
            "-o",
            out,
            "--max-new-tokens",
            "4",
            "--device",
            "cpu",
        ],
        "outputs.txt",
    ),  # fmt: skip
    ("attention", "--output"): (
        lambda lib, out: ["attention", str(lib / "run"), "--source", "a dog", "--device", "cpu", "-o", out],
        "maps.png",
    ),
    ("attention", "--npz"): (
        lambda lib, out: [
            "attention",
            str(lib / "run"),
            "--source",
            "a dog",
            "--device",
            "cpu",
            "-o",
            str(lib / "maps.png"),
            "--npz",
            out,
        ],
        "maps.npz",
    ),  # fmt: skip
    ("transcribe", "--out"): (
        lambda lib, out: [
            "transcribe",
            str(lib / "whisper"),
            str(lib / "tone.wav"),
            "--max-new-tokens",
            "4",
            "--temperature",
            "0",
            "--language",
            "en",
            "--out",
            out,
        ],
        "subs",
    ),  # fmt: skip
    ("score", "--out"): (
        lambda lib, out: ["score", str(lib / "run"), "--data", str(lib / "test.tsv"), "--out", out],
        "scores.jsonl",
    ),
    ("data passkey", "--out"): (
        lambda lib, out: passkey(str(lib / "corpus.txt"), out),
        "keys.jsonl",
    ),
    ("data prepare", "--out"): (
        lambda lib, out: [
            "data",
            "prepare",
            str(lib / "corpus.txt"),
            "--format",
            "text",
            "--tokenizer",
            "byte",
            "--workers",
            "0",
            "--out",
            out,
        ],
        "shards",
    ),  # fmt: skip
}


def output_options(parser: argparse.ArgumentParser, command: str = "") -> list[tuple[str, argparse.Action]]:
    """(command words, action) of every option in `parser` and its subcommands' parsers: depth first."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += output_options(sub, f"{command} {name}".strip())
        elif action.option_strings:
            found.append((command, action))
    return found


def walked() -> list[tuple[str, str]]:
    """(command, main flag) of every option whose type is OutputPath: what the walks below cover."""
    return [
        (command, action.option_strings[0])
        for command, action in output_options(build_parser())
        if isinstance(action.type, OutputPath)
    ]


WALKED = walked()


def test_every_output_option_is_found_and_has_a_command_line():
    named = [
        f"{command} {action.option_strings[0]}"
        for command, action in output_options(build_parser())
        if OUTPUT_FLAGS & set(action.option_strings) and not isinstance(action.type, OutputPath)
    ]
    assert named == [], "an option named like an output must take type=OutputPath"
    known = {("train", "--out"), ("export", "--out"), ("attention", "--output"), ("data prepare", "--out")}
    assert known <= set(WALKED), WALKED
    assert sorted(set(WALKED) - set(WRITERS)) == [], "a new output option needs its command line in WRITERS"


def link(at: Path, to: Path, directory: bool = True) -> Path:
    """A symlink at `at` to the directory `to` (made), or to the file `to` (not made: the link dangles)."""
    (to if directory else to.parent).mkdir(parents=True, exist_ok=True)
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to, target_is_directory=directory)
    return at


# Where the output is put: its path, under tmp_path, with a symlinked directory (to tmp_path/outside) on the way.
SHAPES: dict[str, Callable[[Path, str], str]] = {
    "just below a link": lambda t, name: str(link(t / "LINK", t / "outside") / name),
    "below a link, in a directory still to make": lambda t, name: str(link(t / "LINK", t / "outside") / "new" / name),
    "a link deep in real directories": lambda t, name: str(link(t / "a" / "b" / "LINK", t / "outside") / name),
    "a link to a link": lambda t, name: str(link(t / "LINK2", link(t / "LINK", t / "outside")) / name),
    "the output itself a link": lambda t, name: str(link(t / name, t / "outside" / name, not Path(name).suffix)),
    "relative, below a link": lambda t, name: str(Path(os.path.relpath(link(t / "LINK", t / "outside"))) / name),
}


@pytest.mark.parametrize("checked_by", ["the command line", "the writer"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("writer", WALKED, ids=" ".join)
def test_an_output_through_a_symlink_is_refused_and_nothing_is_made_where_it_leads(
    library, tmp_path, capsys, monkeypatch, writer, shape, checked_by
):
    build, name = WRITERS[writer]
    monkeypatch.chdir(tmp_path)
    out = SHAPES[shape](tmp_path, name)
    if checked_by == "the writer":  # the library behind the command refuses without the parser's check
        monkeypatch.setattr(OutputPath, "__call__", lambda self, text: self.convert(text))
    before = snapshot(tmp_path)
    assert main(build(library, out)) != 0
    assert "symlink" in one_sentence(capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
@pytest.mark.parametrize("writer", WALKED, ids=" ".join)
def test_an_output_on_a_real_path_is_written(library, tmp_path, capsys, monkeypatch, writer, relative):
    build, name = WRITERS[writer]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    out = Path("real") / "deeper" / name if relative else tmp_path / "real" / "deeper" / name
    if writer[0] in ("generate", "attention", "score"):  # a file, in a directory that exists
        (tmp_path / "real" / "deeper").mkdir()
    assert main(build(library, str(out))) == 0, capsys.readouterr().err
    assert (tmp_path / "real" / "deeper" / name).exists()
    assert not any(p.is_symlink() for p in tmp_path.rglob("*"))


# --- the rule itself, in safe_paths ---


def test_the_home_directory_and_those_above_it_may_be_links(tmp_path, monkeypatch):
    real = tmp_path / "disk" / "me"
    real.mkdir(parents=True)
    home = link(tmp_path / "home" / "me", real)
    monkeypatch.setenv("HOME", str(home))
    assert output_dir(home / "runs" / "x") == home / "runs" / "x" and (real / "runs" / "x").is_dir()
    link(tmp_path / "up", tmp_path / "home")
    monkeypatch.setenv("HOME", str(tmp_path / "up" / "me"))
    output_path(tmp_path / "up" / "me" / "runs" / "y")
    elsewhere = link(real / "LINK", tmp_path / "elsewhere")  # a link below the home directory is the user's
    with pytest.raises(ConfigError, match="goes through the symlink LINK to "):
        output_path(tmp_path / "up" / "me" / "LINK" / "x")
    assert not any(elsewhere.iterdir())


def test_an_entry_of_the_root_may_be_a_link():
    entries = [p for p in Path("/").iterdir() if p.is_symlink() and p.is_dir()]
    if not entries:
        pytest.skip("no entry of / here is a symlink to a directory")
    for entry in entries:
        assert output_path(entry / "x" / "y") == entry / "x" / "y"


@pytest.mark.parametrize(
    "write",
    [
        lambda path: write_atomic(path / "f.json", "{}"),
        lambda path: open_replacing(path / "metrics.jsonl").close(),
        lambda path: atomic_path(path / "m.safetensors").__enter__(),
        lambda path: staged_files(path).__enter__(),
        lambda path: output_dir(path),
    ],
    ids=["write_atomic", "open_replacing", "atomic_path", "staged_files", "output_dir"],
)
@pytest.mark.parametrize("below", ["", "new"])
def test_every_safe_write_refuses_a_directory_on_the_way_that_is_a_symlink(tmp_path, write, below):
    outside = tmp_path / "outside"
    path = link(tmp_path / "run" / "LINK", outside) / below
    with pytest.raises(ConfigError, match="LINK is a symlink to |the symlink LINK to "):
        write(path)
    assert list(outside.iterdir()) == []


def test_a_link_at_the_file_itself_is_still_replaced_by_a_safe_write(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("mine")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "f.json").symlink_to(victim)
    write_atomic(tmp_path / "run" / "f.json", "{}")
    assert victim.read_text() == "mine" and not (tmp_path / "run" / "f.json").is_symlink()
