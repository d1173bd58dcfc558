"""The test file `encdec evaluate --data` scores: its format, its reader's options, its texts.

The format is --format, else a run's own data.format, else the file's extension where it says
one thing (.tsv: tsv, .txt: text; a .gz after it is looked through; two files: parallel). A
.jsonl file may hold texts (jsonl) or pairs (jsonl-pairs), so it needs --format. The file is
read by encdec.data.formats.read_corpus, as training reads its data: a pair format gives
(source, target) pairs, a text format documents (a text file's blank-line-separated paragraphs).
Which formats there are and the options each takes is the table encdec.data.formats.FORMATS.
"""

from dataclasses import dataclass
from pathlib import Path

from encdec.data.formats import FILE_FORMATS, FORMATS, files_of, read_corpus
from encdec.data.formats import reader_options as format_options
from encdec.errors import ConfigError

EXTENSION_FORMATS = {".tsv": "tsv", ".txt": "text"}


@dataclass
class TestFile:
    """What a test file holds: pairs for a pair format, documents for a text format."""

    __test__ = False  # not a pytest class, whatever its name

    paths: list[Path]
    format: str
    pairs: list[tuple[str, str]] | None = None
    documents: list[str] | None = None

    @property
    def name(self) -> str:
        """The first file's name without its extensions: test.tsv.gz -> test (the report's folder in a run)."""
        return self.paths[0].name.split(".")[0] or self.paths[0].name


def infer_format(paths: list[Path]) -> str:
    """The format the files' count and extension say, or one sentence asking for --format."""
    if len(paths) == 2:
        return "parallel"
    suffixes = [s.lower() for s in paths[0].suffixes if s.lower() != ".gz"]
    extension = suffixes[-1] if suffixes else ""
    if extension not in EXTENSION_FORMATS:
        known = ", ".join(f"{e} ({f})" for e, f in EXTENSION_FORMATS.items())
        raise ConfigError(
            f"--format is needed: the extension {extension or '(none)'} of {paths[0]} names no format "
            f"(only {known} do); choose one of {', '.join(FORMATS)}"
        )
    return EXTENSION_FORMATS[extension]


def reader_options(format: str, given: dict[str, str | None], defaults: dict[str, str] | None = None) -> dict:
    """The reader options of `format`: those `given` (None: not given), else `defaults` (a run's data section
    when it read the same format), else the reader's own. An option the format's reader has no use for is refused."""
    check_format(format)
    return format_options(format, given, lambda name: "--" + name.replace("_", "-"), defaults)


def check_format(format: str) -> None:
    if format not in FILE_FORMATS:
        raise ConfigError(f"--format {format} is unknown; choose one of {', '.join(FILE_FORMATS)}")


def read_test_file(paths: list[Path], format: str, options: dict) -> TestFile:
    """Every pair or document of the files (one sentence, DataError, for a file that is missing or unreadable)."""
    check_format(format)
    files = FORMATS[format].files or 1
    if len(paths) != files:
        raise ConfigError(
            f"--format {format} takes {files_of(FORMATS[format])}, got {len(paths)}"
            if files > 1
            else f"--format {format} takes one file; two files are read as --format parallel"
        )
    items = list(read_corpus(format, paths, **options))
    if FORMATS[format].pairs:
        return TestFile(paths, format, pairs=items)
    return TestFile(paths, format, documents=items)
