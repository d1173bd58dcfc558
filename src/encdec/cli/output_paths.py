"""The options that name what a command writes (--out, -o, --npz): one argparse type for them all.

Each is checked as a whole when the command line is read, before any work
(`safe_paths.output_path`: no symlink among its components but the system's own),
and a test finds every one of them in the parser by this type, so a new writer's
option is walked by the same checks.
"""

from collections.abc import Callable
from pathlib import Path

from encdec.safe_paths import output_path


class OutputPath:
    """An argparse type: the text of the output option `flag` (made a Path by `convert=Path`), refused in
    one sentence where it goes through a symlink; `stdout` names the value that means standard output."""

    def __init__(self, flag: str, convert: Callable[[str], str | Path] = str, stdout: str | None = None):
        self.flag, self.convert, self.stdout = flag, convert, stdout

    def __call__(self, text: str) -> str | Path:
        if text != self.stdout and text.strip():  # '' is refused by the command, in its own words
            output_path(text, self.flag)
        return self.convert(text)
