"""The `encdec` command line: one plain function per subcommand.

Each subcommand module exposes `add_parser(subparsers)`, which registers its
arguments and sets `func`. User errors (`EncdecError`) become one sentence on
stderr and exit code 2, never a traceback.
"""

import argparse
import logging
import sys

from encdec.cli import compare, data, demo, evaluate, generate, size, train
from encdec.errors import EncdecError

SUBCOMMANDS = [demo, data, train, compare, size, generate, evaluate]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encdec", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
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


if __name__ == "__main__":
    sys.exit(main())
