"""The `encdec` command line: one plain function per subcommand.

Each subcommand module exposes `add_parser(subparsers)`, which registers its
arguments and sets `func`. User errors (`EncdecError`) become one sentence on
stderr and exit code 2, never a traceback; the system's refusals (OSError: a full disk,
a permission) one sentence and exit code 1.
"""

import argparse
import errno
import logging
import sys

from encdec.cli import compare, data, demo, evaluate, export, generate, size, train
from encdec.errors import ConfigError, EncdecError

SUBCOMMANDS = [demo, data, train, compare, size, generate, evaluate, export]


class Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one sentence (`encdec: error: ...`, exit 2) instead of a usage block."""

    def error(self, message: str):
        command = self.prog.partition(" ")[2]
        raise ConfigError(f"{command + ': ' if command else ''}{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="encdec", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
        return args.func(args) or 0
    except EncdecError as error:
        print(f"encdec: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("encdec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that closed early (`| head`)
        sys.stderr.close()
        return 0
    except OSError as error:  # the system refused: a full disk, a permission, a missing directory
        where = f"{error.filename}: " if error.filename else ""
        reason = "the disk is full" if error.errno == errno.ENOSPC else error.strerror or str(error)
        print(f"encdec: error: {where}{reason}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
