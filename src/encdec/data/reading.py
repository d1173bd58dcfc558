"""Reading a user's text file with bounds: regular files only, lines split at '\\n' alone, gzip checked to its end.

A path a user gives (a corpus file, a `generate --input` file) may name anything: a FIFO or a device that
never ends (/dev/zero), a 20 GB file without a newline, a truncated download, a gzip bomb. Each is refused
in one sentence (DataError) naming the file and, where it applies, the line and the limit, after holding
at most about that limit in memory. Lines end at b"\\n" only (a form feed or U+2028 stays inside its line,
as a text-mode read or str.splitlines would not keep it); a "\\r" is dropped only as part of "\\r\\n".
The limits are declared here, once; readers that gather lines into documents bound those too
(MAX_DOCUMENT_CHARS).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from encdec.errors import DataError

MAX_INPUT_LINE_BYTES = 1 << 20  # one `encdec generate` input line
MAX_INPUTS = 1_000_000  # `encdec generate` inputs in all: they are held in memory together
MAX_INPUT_BYTES = 256 << 20  # the bytes of all `encdec generate` inputs together
MAX_CORPUS_LINE_BYTES = 16 << 20  # one line of a corpus file: a JSONL record, a TSV row, a line of a story
MAX_DOCUMENT_CHARS = 16 << 20  # one corpus document gathered from lines: a story, a paragraph, a whole file
CHUNK_BYTES = 1 << 20  # the block a gzip file is checked in

# magic bytes of compressions encdec does not read, so such a file is named for what it is, not "not UTF-8"
UNREAD_COMPRESSIONS = {
    "bzip2": re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"),
    "xz": re.compile(rb"\xfd7zXZ\x00"),
    "zstd": re.compile(rb"\x28\xb5\x2f\xfd"),
}
GZIP_MAGIC = b"\x1f\x8b"


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (a named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def _refuse_irregular(path: Path, mode: int, what: str) -> None:
    if not stat.S_ISREG(mode):
        raise DataError(f"{what} {path} is {_kind(mode)}; encdec reads only regular files")


def require_regular_file(path: str | Path, what: str = "data file") -> None:
    """Refuse a path that does not exist or is not a regular file (a FIFO, a device, a directory), unread."""
    try:
        mode = os.stat(path).st_mode  # follows a symlink: a link to a regular file is fine
    except FileNotFoundError:
        raise DataError(f"{what} {path} does not exist") from None
    except OSError as error:
        raise DataError(f"cannot read {what} {path}: {error.strerror}") from None
    _refuse_irregular(Path(path), mode, what)


@contextlib.contextmanager
def open_regular_file(path: str | Path, what: str = "data file") -> Iterator[BinaryIO]:
    """`path` opened for binary reading, after checking it is a regular file, before and after the open.

    The open itself does not block (O_NONBLOCK), so a FIFO put in the file's place after the first check
    is refused by the second instead of waiting for a writer.
    """
    require_regular_file(path, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise DataError(f"cannot read {what} {path}: {error.strerror}") from None
    try:
        _refuse_irregular(Path(path), os.fstat(fd).st_mode, what)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def iter_bounded_lines(stream: BinaryIO, name: object, limit: int, limit_name: str) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, bytes of the line without its "\\n" or "\\r\\n") of `stream`, split at b"\\n" only.

    A line of more than `limit` bytes is refused as soon as `limit` + 2 bytes of it are read, so a file
    without newlines (or /dev/zero on stdin) never fills the memory.
    """
    number = 0
    while True:
        try:
            raw = stream.readline(limit + 2)
        except (OSError, EOFError, zlib.error) as error:
            raise DataError(f"{name} cannot be read after line {number} ({_reason(error)})") from None
        if not raw:
            return
        number += 1
        line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
        if len(line) > limit:
            raise DataError(
                f"{name} line {number} is longer than {limit:,} bytes ({limit_name}); "
                "is it a text file with one item per line?"
            )
        yield number, line


def decode_line(raw: bytes, name: object, number: int) -> str:
    """A line's bytes as UTF-8 text; a bad byte is one sentence naming the file, the line and the column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{name} line {number} is not valid UTF-8 (byte {raw[error.start]:#04x} at column {error.start + 1}); "
            "convert it to UTF-8, e.g. with iconv"
        ) from None


def _reason(error: BaseException) -> str:
    return str(error) or type(error).__name__


def check_gzip(stream: BinaryIO, name: object, limit: int, limit_name: str) -> None:
    """Decompress all of the gzip file `stream` once, in blocks, then rewind it.

    A truncated or corrupt file is refused before any of it is used: a reader that stops early
    (data.max_documents) would otherwise train on the part before the damage. A run of more than
    `limit` bytes without a newline across blocks (a gzip bomb of zeros) is refused as soon as it is seen.
    """
    lines = run = 0  # newlines so far; bytes since the last one
    try:
        with gzip.GzipFile(fileobj=stream, mode="rb") as unzipped:
            while block := unzipped.read1(CHUNK_BYTES):
                first = block.find(b"\n")
                if first >= 0 and run + first <= limit + 1:  # + 1: the "\r" of a "\r\n"
                    lines += block.count(b"\n")
                    run = len(block) - block.rfind(b"\n") - 1
                else:
                    run += len(block) if first < 0 else first
                if run > limit + 1:
                    raise DataError(
                        f"{name} line {lines + 1} is longer than {limit:,} bytes once decompressed ({limit_name}); "
                        "is it a text file with one item per line?"
                    )
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(
            f"{name} cannot be read as gzip after line {lines} ({_reason(error)}); the file is truncated or corrupt"
        ) from None
    stream.seek(0)


@contextlib.contextmanager
def open_text_file(
    path: str | Path,
    what: str = "data file",
    limit: int = MAX_CORPUS_LINE_BYTES,
    limit_name: str = "MAX_CORPUS_LINE_BYTES",
) -> Iterator[BinaryIO]:
    """A regular file's bytes, decompressed if it is gzip (found by content, checked to its end first).

    A file compressed some other way (bzip2, xz, zstd) is refused by name.
    """
    with open_regular_file(path, what) as handle:
        head = handle.read(10)
        handle.seek(0)
        for compression, magic in UNREAD_COMPRESSIONS.items():
            if magic.match(head):
                raise DataError(f"{what} {path} is {compression}-compressed; encdec reads plain or gzip text")
        if not head.startswith(GZIP_MAGIC):
            yield handle
            return
        check_gzip(handle, path, limit, limit_name)
        with gzip.GzipFile(fileobj=handle, mode="rb") as unzipped:
            yield unzipped


def iter_text_lines(
    path: str | Path,
    what: str = "data file",
    limit: int = MAX_CORPUS_LINE_BYTES,
    limit_name: str = "MAX_CORPUS_LINE_BYTES",
) -> Iterator[tuple[int, str]]:
    """(line number from 1, UTF-8 line without its newline) of a plain or gzip file, each line bounded."""
    with open_text_file(path, what, limit, limit_name) as stream:
        for number, raw in iter_bounded_lines(stream, path, limit, limit_name):
            yield number, decode_line(raw, path, number)


def read_input_lines(stream: BinaryIO, name: object) -> list[str]:
    """Every line of `stream` (a `generate` input file or stdin), held in memory, so bounded in all:
    MAX_INPUT_LINE_BYTES each, MAX_INPUTS lines and MAX_INPUT_BYTES together."""
    lines: list[str] = []
    total = 0
    for number, raw in iter_bounded_lines(stream, name, MAX_INPUT_LINE_BYTES, "MAX_INPUT_LINE_BYTES"):
        total += len(raw) + 1
        if number > MAX_INPUTS:
            raise DataError(f"{name} holds more than {MAX_INPUTS:,} inputs (MAX_INPUTS); split it into smaller files")
        if total > MAX_INPUT_BYTES:
            raise DataError(
                f"{name} holds more than {MAX_INPUT_BYTES:,} bytes of inputs (MAX_INPUT_BYTES); "
                "split it into smaller files"
            )
        lines.append(decode_line(raw, name, number))
    return lines
