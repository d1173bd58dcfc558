"""What a command reads and what it writes: one argparse type for every argument that names an input
(`InputPath`) and one for every option that names an output (`OutputPath`: --out, -o, --npz).

An output is checked as a whole when the command line is read, before any work: no symlink among its
components but the system's own (`safe_paths.output_path`), and of the kind the command writes (no
directory where a file is written, no file where a directory is). Then `check_arguments`, which
`encdec.cli.main` calls once the arguments are parsed, refuses a NUL byte or bytes that are not UTF-8 in
any argument, and compares every output of the command with every input and every other output
(`check_apart`): the same path once resolved, or the same file (st_dev and st_ino: a hard link, a symlink, a
bind mount), a directory written that holds an input, or an entry already inside an input directory, is
refused in one sentence naming both. Tests find every input and output in the parser by these types, so a
new option is walked by the same checks.
"""

import argparse
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from encdec.errors import ConfigError
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import output_path, refuse_unsafe_output


class InputPath:
    """An argparse type: the text of an argument naming what the command reads (`name` says which in a
    refusal: "--data", "the corpus file"), made a Path by `convert=Path`; `stdin` names the value that means
    standard input. An empty value, or one holding a NUL byte, is refused; one that names nothing on disk (a
    Hub id, a tokenizer kind) is read as the command reads it, and only one that exists is guarded."""

    def __init__(self, name: str, convert: Callable[[str], str | Path] = str, stdin: str | None = None):
        self.name, self.convert, self.stdin = name, convert, stdin

    def __call__(self, text: str) -> str | Path:
        refuse_nul(text, self.name)
        if text != self.stdin and not text.strip():  # Path('') would be the current directory
            raise ConfigError(f"{self.name} must name what to read, not an empty string")
        return self.convert(text)

    def named(self, value: object) -> bool:
        """Whether `value` names a path (not stdin, not '')."""
        return value is not None and str(value) != self.stdin and bool(str(value).strip())


class OutputPath:
    """An argparse type: the text of the output option `flag` (made a Path by `convert=Path`) that writes
    `writes` ("the jsonl file", "a run directory": a directory where `directory`), refused in one sentence
    where it is empty, holds a NUL byte, goes through a symlink or is of the other kind; `stdout` names the
    value that means standard output."""

    def __init__(
        self,
        flag: str,
        writes: str,
        convert: Callable[[str], str | Path] = str,
        stdout: str | None = None,
        directory: bool = False,
    ):
        self.flag, self.writes, self.convert, self.stdout, self.directory = flag, writes, convert, stdout, directory
        self.name = flag

    def __call__(self, text: str) -> str | Path:
        refuse_nul(text, self.flag)
        if text != self.stdout and not text.strip():  # Path('') would be the current directory
            raise ConfigError(f"{self.flag} must name {self.writes}, not an empty string")
        if text != self.stdout:
            self.check_kind(output_path(text, self.flag))
        return self.convert(text)

    def named(self, value: object) -> bool:
        """Whether `value` names a path (not stdout, not '')."""
        return value is not None and str(value) != self.stdout and bool(str(value).strip())

    def check_kind(self, path: Path) -> None:
        """Refuse a directory where a file is written, and anything else where a directory is."""
        if not self.directory and path.is_dir():
            raise ConfigError(f"{self.flag} {path} is a directory; name {self.writes} to write")
        if self.directory and os.path.lexists(path) and not path.is_dir():
            what = "a file" if path.is_file() else "not a directory"
            raise ConfigError(f"{self.flag} {path} is {what}; name {self.writes}")


def add_model_argument(parser: argparse.ArgumentParser, help: str, metavar: str | None = None) -> None:
    """The positional `model` a command reads (a run, checkpoint or Hugging Face directory, or a Hub id, as
    `help` says which it takes), shown as `metavar` in the usage line where given."""
    parser.add_argument("model", metavar=metavar, type=InputPath("the model"), help=help)


def add_out_directory(parser: argparse.ArgumentParser, writes: str, help: str) -> None:
    """The required --out of a command that writes a directory (`writes` names it in a refusal)."""
    parser.add_argument("--out", type=OutputPath("--out", writes, directory=True), required=True, help=help)


def refuse_nul(text: str, name: str) -> None:
    if "\0" in text:
        raise ConfigError(f"{name} {text!r} holds a NUL byte, which no file name can")


Named = tuple[InputPath | OutputPath, Path]


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The command line as a whole, once read and before any work: no NUL byte and nothing but UTF-8
    (`refuse_undecodable`), and no output one of its inputs (`check_apart`)."""
    refuse_undecodable(parser, args)
    check_apart(parser, args)


def refuse_undecodable(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse an argument that holds a NUL byte (no command line a shell passes can; a library given one
    raises) or bytes that are not UTF-8: Python hands those over as lone surrogates, which no tokenizer
    encodes and the libraries that write a model's files (tokenizers) refuse in a path."""
    for action in chosen_actions(parser, args):
        values = getattr(args, action.dest, None)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, (str, Path)) or str(value).isascii() and "\0" not in str(value):
                continue
            name = action.option_strings[0] if action.option_strings else action.dest
            refuse_nul(str(value), name)
            try:
                str(value).encode("utf-8")
            except UnicodeEncodeError:
                shown = str(value).encode("utf-8", "backslashreplace").decode()
                raise ConfigError(
                    f"{name} {shown!r} holds bytes that are not UTF-8; encdec reads its command line as UTF-8"
                ) from None


def check_apart(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, before any work, a command line one of whose outputs is one of its inputs (or another of its
    outputs), or a directory written that holds one: what the command would write over."""
    read: list[Named] = []
    written: list[Named] = []
    for action in chosen_actions(parser, args):
        if isinstance(action.type, (InputPath, OutputPath)):
            values = getattr(args, action.dest, None)
            for value in values if isinstance(values, list) else [values]:
                if action.type.named(value):
                    (written if isinstance(action.type, OutputPath) else read).append((action.type, Path(value)))
    for i, (output, out) in enumerate(written):
        for other, path in [*read, *written[:i]]:
            refuse_overlap(output, out, other, path)


def chosen_actions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Iterator[argparse.Action]:
    """The actions of `parser` and of the subcommands' parsers `args` chose, down to the last."""
    while parser is not None:
        chosen = None
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None))
            else:
                yield action
        parser = chosen


def refuse_overlap(output: OutputPath, out: Path, other: InputPath | OutputPath, path: Path) -> None:
    """Raise where `out` (written by `output`) is `path` (named by `other`), or a directory written that
    holds it; nothing where `path` does not exist."""
    held = identity(path)
    if held is None:
        return
    spelled, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    written, written_real = identity(out), Path(os.path.realpath(out))
    role = "writes" if isinstance(other, OutputPath) else "reads"
    if written == held or written_real == real:
        kind = "directory" if os.path.isdir(path) else "file"
        raise ConfigError(
            f"{output.flag} {out} is the same {kind} as {other.name} {path}, which the command {role}; "
            f"choose another {output.flag}"
        )
    if output.directory and written is not None:
        for folder in {*spelled.parents, *real.parents}:
            if folder == written_real or identity(folder) == written:
                refuse_unsafe_output(out, output.flag)  # the root, the home directory ...: that reason first
                raise ConfigError(
                    f"{output.flag} {out} holds {other.name} {path}, which the command {role}; "
                    f"choose another {output.flag}"
                )
    entry = held_entry(written_real, real)
    if entry is not None:
        where = (
            f"the {entry.name} of the run {path}" if RunDir(real).is_run() else f"{entry.name} in {other.name} {path}"
        )
        verb = "is" if written_real == entry else "lies inside"
        raise ConfigError(f"{output.flag} {out} {verb} {where}, which the command {role}; choose another {output.flag}")


def held_entry(out: Path, directory: Path) -> Path | None:
    """The entry of `directory` (real paths both) that writing `out` would replace or write into, where it is
    there already; in a run directory only one that training writes (its checkpoints, config.yaml, metrics...):
    a run's directory may hold other outputs beside them (evaluate's eval/, a picture). None where `out` is not
    below `directory`."""
    if directory not in out.parents:
        return None
    entry = directory / out.relative_to(directory).parts[0]
    if not os.path.lexists(entry):
        return None
    run = RunDir(directory)
    if run.is_run() and entry not in {*run.written(), run.lock, run.marker} - {run.eval_dir}:
        return None
    return entry


def identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of what `path` names, links followed; None where nothing is there."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):  # absent, unreadable, or a NUL in the name
        return None
    return found.st_dev, found.st_ino
