"""Fuzzing the command line by enumeration: every option and argument of every subcommand, found by walking
the parser (`encdec.cli.build_parser()`: its actions and its subcommands' parsers, with no list of options
kept here), is given hostile values (empty, blank, negative, zero, huge, NaN, infinite, very long, a NUL
byte, an undecodable byte, a directory, a path through a symlink, the command's own input or output), and
each command line ends in exit 0, or in exit 1 or 2 with exactly one `encdec: error:` line on stderr and no
traceback, in bounded work (function calls, counted), with the command's inputs unchanged.

Two walks: every (option, value) through `main` up to the command's own work (the parser, the declared
types, the check that no output is an input), all of them; and a sample drawn from the same pairs run as the
whole command on a small real run, stopped once it has done CALLS of work (it took the values and went on
to real work). Each subcommand has one good command line here (BASES) that the walked option is put on, so a
new option is walked as soon as it is declared; a new subcommand needs its line, or the first test fails.
"""

import argparse
import contextlib
import io
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import yaml
from bad_inputs_kit import progress, tiny
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from work_kit import counted_calls

import encdec.cli
from encdec.cli import build_parser, main
from encdec.cli.output_paths import InputPath, OutputPath

FIXTURE_RUN = Path(__file__).resolve().parent / "fixtures" / "checkpoint_2ba69c1" / "run"  # 50k parameters, T5
PARSED_CALLS = 300_000  # a command line read and checked: about 25,000 calls; one loop per byte of a value is more
CALLS = 3_000_000  # the whole command, sampled: then it is stopped (a tiny run's generate makes about a million)


@dataclass
class Base:
    """A subcommand's good command line: its positionals (dest -> value) and options (flag -> value; None for
    a flag without one)."""

    positionals: dict[str, str | list[str]] = field(default_factory=dict)
    options: dict[str, str | list[str] | None] = field(default_factory=dict)


def bases(p: Path, out: Path) -> dict[str, Base]:
    """One good command line for each subcommand, reading what `p` holds and writing under `out`."""
    run, corpus, config = str(p / "run"), [str(p / "corpus.txt")], str(p / "tiny.yaml")
    on_cpu = {"--device": "cpu", "--max-new-tokens": "2"}
    return {
        "demo": Base({}, {"--steps": "1"}),
        "data prepare": Base(
            {"inputs": corpus}, {"--format": "text", "--tokenizer": "byte", "--workers": "0", "--out": str(out / "s")}
        ),
        "data inspect": Base({"shards": str(p / "shards")}, {"--max-length": "32", "--num-examples": "1"}),
        "data passkey": Base(
            {"inputs": corpus},
            {"--format": "text", "--tokenizer": "byte", "--lengths": "256", "--out": str(out / "keys.jsonl")},
        ),
        "train": Base({"config": config}, {"--out": str(out / "run")}),
        "compare": Base({"configs": [config]}, {"--out": str(out / "experiment")}),
        "size": Base({"config": config}),
        "generate": Base({"model_dir": run}, {"--input": str(p / "inputs.txt"), "-o": str(out / "o.txt"), **on_cpu}),
        "evaluate": Base(
            {"model": run}, {"--data": [str(p / "test.tsv")], "--format": "tsv", "--out": str(out / "report"), **on_cpu}
        ),
        "score": Base(
            {"model": run}, {"--data": [str(p / "test.tsv")], "--out": str(out / "s.jsonl"), "--device": "cpu"}
        ),
        "export": Base({"model": run}, {"--out": str(out / "hf")}),
        "average": Base({"run": run}, {"--last": "1", "--out": str(out / "avg")}),
        "attention": Base({"model": run}, {"--source": "a dog", "-o": str(out / "maps.png"), **on_cpu}),
        "serve": Base({"model": run}, {"--port": "0", "--device": "cpu"}),
        "transcribe": Base(
            {"model_dir": str(p / "whisper"), "audio": [str(p / "speech.wav")]},
            {"--out": str(out / "subs"), "--temperature": "0", **on_cpu},
        ),
    }


def walk(parser: argparse.ArgumentParser, command: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command words, parser) of every subcommand that runs: the parsers without subcommands of their own."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield command, parser
    for action in subcommands:
        for name, sub in action.choices.items():
            yield from walk(sub, f"{command} {name}".strip())


PARSERS = dict(walk(build_parser()))
WALKED = [
    (command, action)
    for command, parser in PARSERS.items()
    for action in parser._actions
    if not isinstance(action, argparse._HelpAction)
]


def label(walked: tuple[str, argparse.Action]) -> str:
    command, action = walked
    return f"{command} {action.option_strings[0] if action.option_strings else action.dest}"


def role_paths(base: Base, parser: argparse.ArgumentParser, kind: type) -> list[str]:
    """The values `base` gives the arguments of `parser` declared `kind` (InputPath or OutputPath)."""
    given = {**base.positionals, **base.options}
    found = []
    for action in parser._actions:
        names = [action.dest, *action.option_strings]
        value = next((given[n] for n in names if n in given), None)
        if isinstance(action.type, kind) and value is not None:
            found += value if isinstance(value, list) else [value]
    return found


def hostile(p: Path, command: str, base: Base, action: argparse.Action) -> dict[str, str]:
    """What each walked argument is given: the same for all, but for the command's own paths, which depend on
    which side the argument is (an output is given an input of the command, an input its output)."""
    parser = PARSERS[command]
    inputs = role_paths(base, parser, InputPath) or [str(p / "corpus.txt")]
    outputs = role_paths(base, parser, OutputPath) or inputs
    return {
        "empty": "",
        "blank": "  ",
        "negative": "-1",
        "zero": "0",
        "huge": "9" * 40,
        "nan": "nan",
        "infinite": "-inf",
        "long": "x" * 20_000,
        "nul": "a\0b",
        "undecodable": "caf\udce9",  # a byte that is not UTF-8, as Python hands it over from argv
        "a directory": str(p / "folder"),
        "through a symlink": str(p / "link" / "x.txt"),
        "its own input or output": (inputs if isinstance(action.type, OutputPath) else outputs)[0],
    }


HOSTILE_NAMES = list(hostile(Path("/"), "size", Base({"config": "c"}), WALKED[0][1]))


def command_line(command: str, action: argparse.Action, value: str | None, base: Base) -> list[str]:
    """`base` with `action` given `value` (in its positional's place, or as an option after the others)."""
    words = command.split()
    for positional in PARSERS[command]._actions:
        if positional.option_strings or isinstance(positional, argparse._HelpAction):
            continue
        given = [value] if positional is action else base.positionals.get(positional.dest, [])
        words += given if isinstance(given, list) else [given]
    for flag, given in base.options.items():
        if flag not in action.option_strings:
            words += [flag, *(given if isinstance(given, list) else [] if given is None else [given])]
    if action.nargs == 0:
        words.append(action.option_strings[0])
    elif action.option_strings:  # --flag=VALUE: a value that starts with '-' (-1, -inf) is read as the value
        flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
        words += [f"{flag}={value}"] if flag.startswith("--") else [flag, value]
    return words


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Path:
    """What the command lines read: a copy of a small trained run, a tiny config, a corpus, its shards, a test
    file, inputs, a directory and a symlink to it."""
    root = Path(os.path.realpath(tmp_path_factory.mktemp("cli_fuzz")))
    shutil.copytree(FIXTURE_RUN, root / "run")
    config = tiny(training={"steps": 1, "batch_size": 2, "threads": 1, "device": "cpu"})
    config["data"]["max_documents"] = 8
    (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    (root / "corpus.txt").write_text("once upon a time there was a girl.\n\nthe sun was hot and the dog ran.\n" * 20)
    (root / "test.tsv").write_text("a dog runs\tein hund rennt\n")
    (root / "inputs.txt").write_text("a dog runs\n")
    (root / "folder").mkdir()
    (root / "link").symlink_to(root / "folder")
    speech_model(root)
    with contextlib.redirect_stdout(io.StringIO()):
        argv = ["data", "prepare", str(root / "corpus.txt"), "--format", "text", "--tokenizer", "byte"]
        assert main([*argv, "--workers", "0", "--out", str(root / "shards")]) == 0
    return root


def speech_model(root: Path) -> None:
    """What transcribe reads: a tiny random Whisper directory with the byte tokenizer, and 1.5 s of noise."""
    import wave

    transformers = pytest.importorskip("transformers")
    from encdec.interop.hf_tokenizer import convert_tokenizer
    from encdec.tokenizers import build_tokenizer
    from tests.generation import whisper_kit

    whisper_kit.tiny_whisper(transformers, root / "whisper")
    convert_tokenizer(build_tokenizer("byte")).save(root / "whisper")
    samples = (torch.randn(24_000, generator=torch.Generator().manual_seed(0)) * 3000).to(torch.int16)
    with wave.open(str(root / "speech.wav"), "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16_000)
        out.writeframes(samples.numpy().tobytes())


def fingerprint(root: Path) -> dict:
    """Every file below `root`, by its size and modification time."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def ends_well(code: int, err: str) -> None:
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert "Traceback" not in err, err
    if code != 0:
        assert code in (1, 2) and len(lines) == 1 and lines[0].startswith("encdec: error: "), (code, err)


@contextlib.contextmanager
def threads_kept() -> Iterator[None]:
    """torch's threads as they were (a --threads a command line took sets them)."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def test_every_subcommand_has_a_good_command_line(tmp_path):
    assert sorted(bases(tmp_path, tmp_path)) == sorted(PARSERS)
    assert len(WALKED) > 150 and {"data passkey --out", "generate --input", "serve --port"} <= set(map(label, WALKED))


@pytest.mark.parametrize("walked", WALKED, ids=label)
def test_every_option_given_hostile_values_is_read_or_refused_in_one_sentence(place, tmp_path, monkeypatch, walked):
    command, action = walked
    base = bases(place, tmp_path / "out")[command]
    checked = encdec.cli.check_arguments

    def read_only(parser, args):  # the command line read and checked, as main does; then nothing is run
        checked(parser, args)
        args.func = lambda args: 0

    monkeypatch.setattr(encdec.cli, "check_arguments", read_only)
    monkeypatch.chdir(tmp_path)  # a relative value ("0", "nan") names a path here
    values = {"the flag": None} if action.nargs == 0 else hostile(place, command, base, action)
    for name, value in values.items():
        err = io.StringIO()
        with threads_kept(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            with counted_calls() as work:
                code = main(command_line(command, action, value, base))
        ends_well(code, err.getvalue())
        assert work.calls < PARSED_CALLS, f"{name}: {work.calls:,} calls"


class Stopped(BaseException):
    """Raised into a command that has done CALLS of work: not an Exception, so no handler of its takes it."""


@contextlib.contextmanager
def stopped_after(calls: int) -> Iterator[None]:
    """Raise Stopped at the first Python call after `calls` calls, outside any import (a module left half
    imported would fail the tests after this one)."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
            if count > calls and event == "call" and not importing(frame):
                raise Stopped

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)


def importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def served_and_stopped(monkeypatch) -> Iterator[None]:
    """`encdec serve` started (the model loaded, the port bound) and stopped at once, as a Ctrl-C would: uvicorn's
    main loop returns as it starts; and the signal handlers serve sets put back."""
    uvicorn = pytest.importorskip("uvicorn")

    async def no_loop(self) -> None:
        return None

    monkeypatch.setattr(uvicorn.Server, "main_loop", no_loop)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for stop, handler in handlers.items():
            signal.signal(stop, handler)


def eager(model=None, **options):
    """torch.compile's stand-in: the function itself. Compiling is minutes of a C compiler and threads of its
    own, which a stop in the middle would leave behind; what is fuzzed is the command line, not inductor."""
    return model if model is not None else (lambda function: function)


SAMPLED = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@SAMPLED
@given(walked=st.sampled_from(WALKED), name=st.sampled_from(HOSTILE_NAMES))
def test_a_sample_of_hostile_command_lines_run_whole_ends_well(place, tmp_path_factory, monkeypatch, walked, name):
    command, action = walked
    out = tmp_path_factory.mktemp("out")
    monkeypatch.chdir(out)  # what a relative value ("0", "nan") names is written here
    monkeypatch.setattr(torch, "compile", eager)  # --compile, training.compile: read, then run eagerly
    base = bases(place, out)[command]
    value = None if action.nargs == 0 else hostile(place, command, base, action)[name]
    before = fingerprint(place)
    err = io.StringIO()
    code: int | None = None
    with threads_kept(), served_and_stopped(monkeypatch) if command == "serve" else contextlib.nullcontext():
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                with stopped_after(CALLS):
                    code = main(command_line(command, action, value, base))
            except Stopped:  # it took the values and went on to real work
                pass
    if code is not None:
        ends_well(code, err.getvalue())
    after = fingerprint(place)  # a command may write into the directory it was given, but changes nothing there
    assert {p: after.get(p) for p in before} == before


# what the walks found, kept as plain cases


@pytest.mark.parametrize("walked", [w for w in WALKED if isinstance(w[1].type, OutputPath)], ids=label)
def test_an_empty_output_is_refused_not_taken_for_the_current_directory(tmp_path, monkeypatch, capsys, walked):
    """Path('') is '.': `data prepare --out ''` wrote its shards into the current directory."""
    command, action = walked
    monkeypatch.chdir(tmp_path)
    base = bases(tmp_path, tmp_path)[command]
    for empty in ("", "  "):
        assert main(command_line(command, action, empty, base)) == 2
        assert "must name" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_text_that_is_not_utf8_is_one_sentence(capsys):
    """An argument's bytes that are not UTF-8 reach Python as lone surrogates, which no tokenizer encodes:
    `generate --prefix` ended in a UnicodeEncodeError."""
    assert main(["generate", "org/name", "--prefix", "caf\udce9 "]) == 2
    assert capsys.readouterr().err == "encdec: error: --prefix 'caf\\\\udce9 ' holds bytes that are not UTF-8; " + (
        "encdec reads its command line as UTF-8\n"
    )
