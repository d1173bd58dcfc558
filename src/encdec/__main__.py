"""`python -m encdec` and the `encdec` command: the command line, and Ctrl-C while it is still being imported
(torch takes seconds) said in one line with exit code 130, as once it runs (encdec.cli.main)."""

import sys


def run() -> int:
    try:
        from encdec.cli import main
    except KeyboardInterrupt:
        print("encdec: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(run())
