"""The `encdec` command line: one plain function per subcommand.

Each subcommand module exposes `add_parser(subparsers)`, which registers its
arguments and sets `func`. User errors (`EncdecError`) become one sentence on
stderr and exit code 2, never a traceback; the system's refusals (OSError: a full disk,
a permission) one sentence and exit code 1; Ctrl-C `encdec: interrupted` and exit code 130,
from the first moment: the subcommands (and torch) are imported inside `main`. Whatever a
message embeds, it is printed as one line of at most MAX_LINE characters, alone: what libraries write to
stderr waits for encdec's own output and a refusal drops it (encdec.cli.held). Under torchrun
only rank 0 prints (every process fails alike) and each writes its sentence for the
launcher (encdec.training.launch).
"""

import argparse
import errno
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from encdec.cli.held import library_output_held
from encdec.cli.output_paths import check_arguments
from encdec.cli.threads import add_threads_option, use_threads
from encdec.errors import ConfigError, EncdecError

# subcommand -> (its module in encdec.cli, its help); modules are named for what they hold where the word means
# more elsewhere (generation/generate.py is the library's generate, modules/attention.py the attention layer)
SUBCOMMANDS = {
    "demo": ("demo", "a short tour of the model API"),
    "data": ("data", "prepare and inspect data"),
    "train": ("train", "train a model from a YAML run config"),
    "compare": ("compare", "train configs side by side; print the table"),
    "size": ("size", "parameter counts and Chinchilla sizing"),
    "generate": ("generate_text", "generate text from a model directory"),
    "transcribe": ("transcribe_audio", "transcribe recordings of any length: text, segments, subtitles"),
    "evaluate": ("evaluate", "loss, perplexity and scored generations of a model"),
    "score": ("score", "the log-probability of given targets, token by token"),
    "export": ("export", "write a run as a Hugging Face model directory"),
    "average": ("average", "average a run's last checkpoints"),
    "attention": ("attention_maps", "draw a model's cross- or encoder self-attention as heat maps"),
    "serve": ("serve", "serve a model over HTTP, with a page to try it"),
}
MAX_LINE = 299  # characters of the one line an error is: a message embedding a megabyte is cut with "..."
MAX_WORD = 60  # characters of a word one_line keeps whole; a longer one is a value (a path) it may cut


class Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one sentence (`encdec: error: ...`, exit 2) instead of a usage block, and
    whose descriptions keep their lines (a subcommand's examples stay one to a line)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        command = self.prog.partition(" ")[2]
        raise ConfigError(f"{command + ': ' if command else ''}{message} (see --help)")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Given the arguments, only the subcommand they name has its module (and what
    it imports: torch, for most) imported and its arguments declared; the others are listed by name and help,
    so `encdec --help` imports no subcommand. Without them, every subcommand is declared."""
    parser = Parser(prog="encdec", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = Commands(parser.add_subparsers(dest="command", required=True))
    named = None if argv is None else next((word for word in argv if word in SUBCOMMANDS), "")
    for name, (module, help_text) in SUBCOMMANDS.items():
        if named is None or name == named:
            importlib.import_module(f"encdec.cli.{module}").add_parser(subparsers)
        else:
            subparsers.add_parser(name)
    return parser


class Commands:
    """argparse's subparsers as a subcommand's `add_parser` sees them: its help comes from SUBCOMMANDS."""

    def __init__(self, subparsers):
        self.subparsers = subparsers

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        parser = self.subparsers.add_parser(name, help=SUBCOMMANDS[name][1], **kwargs)
        add_threads_option(parser, name)  # --threads on every command that computes
        return parser


def main(argv: list[str] | None = None) -> int:
    with library_output_held() as held:  # a library's warnings wait for encdec's output; a refusal drops them
        try:
            with interrupts_stop_at_once():
                argv = sys.argv[1:] if argv is None else argv
                parser = build_parser(argv)
                args = parser.parse_args(argv)
                check_arguments(parser, args)  # no NUL, only UTF-8, no output over an input: before any work
            logging.basicConfig(level=log_level(args.verbose), format="%(message)s")
            use_threads(args)
            return args.func(args) or 0
        except EncdecError as error:
            held.drop()
            return refuse(str(error), getattr(error, "exit_code", 2))
        except KeyboardInterrupt:
            held.drop()
            say("encdec: interrupted")
            return 130
        except BrokenPipeError:  # output piped into a reader that closed early (`| head`)
            held.drop()
            sys.stderr.close()
            return 0
        except OSError as error:  # the system refused: a full disk, a permission, a missing directory
            held.drop()
            where = f"{error.filename}: " if error.filename else ""
            reason = "the disk is full" if error.errno == errno.ENOSPC else error.strerror or str(error)
            return refuse(f"{where}{reason}", 1)


@contextmanager
def interrupts_stop_at_once() -> Iterator[None]:
    """Around start-up (importing the subcommands, torch among them, and reading the arguments): Ctrl-C ends
    the process at once, in one line and exit code 130. Nothing is written yet, and a KeyboardInterrupt raised
    inside an import may be swallowed there and leave a module half made."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    previous = signal.signal(signal.SIGINT, _stop_at_once)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop_at_once(signum: int, frame: FrameType | None) -> None:
    # launch.prints_failure, without importing torch in a signal handler: not under encdec's launcher, and under
    # torchrun's agent only on rank 0
    rank_0_speaks = "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("RANK", "0") != "0"
    if "ENCDEC_LAUNCHER" not in os.environ and not rank_0_speaks:
        os.write(2, b"encdec: interrupted\n")
    os._exit(130)


def one_line(message: str, limit: int = MAX_LINE) -> str:
    """`message` as one line (line breaks and runs of spaces made one space) of at most `limit` characters. A line
    too long loses what it embeds first: a word longer than MAX_WORD (a path, a value) keeps its start and its end
    about a "...". Words are never cut otherwise: a line still too long loses whole words from its middle, so its
    start and its end (the reason) stay. A refusal that lists things bounds its list (errors.listed) to stay whole.
    """
    words = message.split()
    excess = len(" ".join(words)) - limit
    for i in sorted(range(len(words)), key=lambda i: -len(words[i])):
        if excess <= 0 or len(words[i]) <= MAX_WORD:
            break
        keep = max(MAX_WORD, len(words[i]) - excess)
        excess -= len(words[i]) - keep
        words[i] = words[i][: (keep - 3) // 2] + "..." + words[i][len(words[i]) - (keep - 3 - (keep - 3) // 2) :]
    if excess <= 0:
        return " ".join(words)
    head, tail = [], []  # words kept from the start (about a third of the line) and from the end
    while len(" ".join(head + words[:1])) <= limit // 3:
        head.append(words.pop(0))
    while len(" ".join([*head, "...", words[-1], *tail])) <= limit:
        tail.insert(0, words.pop())
    return " ".join(head + ["..."] + tail)


def refuse(message: str, code: int) -> int:
    """Print `message` as `encdec: error: ...` (one line) and return `code`; one of several processes also
    records it for the launcher (torchrun's or encdec's), and prints it only if no other prints for it."""
    line = one_line(f"encdec: error: {message}")
    if "WORLD_SIZE" in os.environ:
        from encdec.training.launch import record_failure

        record_failure(line.removeprefix("encdec: error: "), code)
    say(line)
    return code


def say(line: str) -> None:
    """Print `line` on stderr, unless this is one of several processes and another prints for it."""
    if "WORLD_SIZE" in os.environ:
        from encdec.training.launch import prints_failure

        if not prints_failure():
            return
    print(line, file=sys.stderr)


def log_level(verbose: bool) -> int:
    """INFO with -v, else WARNING; ERROR in a process whose warnings another repeats (torchrun's rank > 0)."""
    if "WORLD_SIZE" in os.environ:
        from encdec.training.launch import speaks_for_all

        if not speaks_for_all():
            return logging.ERROR
    return logging.INFO if verbose else logging.WARNING


if __name__ == "__main__":
    sys.exit(main())
