"""Inputs read with bounds (issue 27): a user's file is read as a regular file, a line at a time, each bounded.

A FIFO, a device or a directory is refused unread; a line (or a document gathered from lines) over its
limit is refused after holding about the limit in memory; lines end at "\\n" alone, so a form feed or
U+2028 does not split an input; a damaged gzip file is refused before any of it is used, even by a
reader that stops early. Each refusal is one sentence: `encdec: error: ...`, exit code 2, no traceback.
"""

import bz2
import gzip
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bad_inputs_kit import STORIES, TINY, progress

from encdec.cli import main
from encdec.data import reading
from encdec.data.formats import read_corpus
from encdec.data.reading import MAX_CORPUS_LINE_BYTES, MAX_INPUT_LINE_BYTES, iter_text_lines, read_input_lines
from encdec.errors import DataError

FIXTURE_RUN = Path(__file__).resolve().parent / "fixtures" / "checkpoint_2ba69c1" / "run"
NO_NEWLINE_BYTES = 512 << 20  # a sparse file of zeros: no disk used, and far more than any limit

# Runs every case through `main` in ONE child process (one import of torch), each case under an alarm, the
# child's heap capped at 4 GiB: a regression fails its case (TimeoutError, MemoryError), it cannot hang the
# suite or take the machine's memory. Prints per case the exit code, stderr and the peak-RSS growth.
RUNNER = r"""
import contextlib, io, json, logging, resource, signal, sys

resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, 4 << 30))
from encdec.cli import main

def give_up(signum, frame):
    raise TimeoutError("the case did not finish in 20 s")

signal.signal(signal.SIGALRM, give_up)
results, stdin = {}, sys.stdin
for name, case in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    logging.root.handlers.clear()  # main's basicConfig binds the log to this case's stderr
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    signal.alarm(20)
    try:
        sys.stdin = open(case["stdin"]) if case["stdin"] else stdin
        with contextlib.redirect_stderr(err):
            code = main(case["argv"])
    except BaseException as error:
        code = f"{type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
        if sys.stdin is not stdin:
            sys.stdin.close()
        sys.stdin = stdin
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    results[name] = {"code": code, "stderr": err.getvalue(), "grew_mib": grew / 1024}
print(json.dumps(results))
"""


def cli_cases(root: Path) -> dict[str, tuple[list[str], str | None, str]]:
    """name -> (argv, a file to read as stdin or None, a piece of the sentence); the files they need made."""
    os.mkfifo(root / "fifo")
    (root / "folder").mkdir()
    with open(root / "no_newline.txt", "wb") as handle:
        handle.truncate(NO_NEWLINE_BYTES)
    run = shutil.copytree(FIXTURE_RUN, root / "run")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))

    def generate(path: object) -> list[str]:
        return ["generate", str(run), "-i", str(path), "--max-new-tokens", "1", "--device", "cpu"]

    def train(path: object, key: str = "train", fmt: str = "tinystories") -> list[str]:
        out = ["train", str(config), "--out", str(root / "out"), "--set", f"data.format={fmt}"]
        return [*out, "--set", f"data.{key}=[{path}]"]

    prepare = ["data", "prepare", str(root / "fifo"), "--format", "text", "--tokenizer", "byte"]
    return {
        "generate -i a FIFO": (generate(root / "fifo"), None, "is a FIFO"),
        "generate -i /dev/zero": (generate("/dev/zero"), None, "/dev/zero is a character device"),
        "generate -i a directory": (generate(root / "folder"), None, "is a directory"),
        "train on a FIFO": (train(root / "fifo"), None, "is a FIFO"),
        "train on /dev/zero": (train("/dev/zero"), None, "/dev/zero is a character device"),
        "validate on a FIFO": (train(root / "fifo", "validation", "text"), None, "is a FIFO"),
        "prepare shards of a FIFO": ([*prepare, "--out", str(root / "out")], None, "is a FIFO"),
        "generate -i a file without newlines": (generate(root / "no_newline.txt"), None, "MAX_INPUT_LINE_BYTES"),
        "generate from /dev/zero on stdin": (generate("-"), "/dev/zero", "stdin line 1 is longer than 1,048,576"),
        "train on a file without newlines": (train(root / "no_newline.txt", fmt="text"), None, "MAX_CORPUS_LINE"),
    }


def listing(root: Path) -> dict[Path, tuple]:
    """Every file below root but the cases' output: small files by bytes, all by size and modification time."""
    files = {}
    for path in sorted(root.rglob("*")):
        if "out" in path.relative_to(root).parts or path.is_dir():
            continue
        small = path.is_file() and path.stat().st_size < 1 << 20
        files[path] = (path.stat().st_size, path.stat().st_mtime_ns, path.read_bytes() if small else None)
    return files


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """The CLI cases, run once in a child process: name -> code, stderr, peak-RSS growth, the piece to say."""
    root = tmp_path_factory.mktemp("reading")
    cases = cli_cases(root)
    before = listing(root)
    argv = {name: {"argv": argv, "stdin": stdin} for name, (argv, stdin, _) in cases.items()}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    child = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(argv)], capture_output=True, text=True, timeout=120, env=env
    )
    assert child.returncode == 0, child.stderr[-2000:]
    results = json.loads(child.stdout.strip().splitlines()[-1])
    unchanged = listing(root) == before
    return {name: {**results[name], "says": says, "unchanged": unchanged} for name, (_, _, says) in cases.items()}


def assert_one_sentence(code: object, err: str, says: str) -> None:
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("encdec: error: "), err
    assert len(lines[0]) < 300 and "Traceback" not in err, err
    assert says in lines[0], lines[0]


NOT_REGULAR = [
    "generate -i a FIFO",
    "generate -i /dev/zero",
    "generate -i a directory",
    "train on a FIFO",
    "train on /dev/zero",
    "validate on a FIFO",
    "prepare shards of a FIFO",
]
TOO_LONG = [
    "generate -i a file without newlines",
    "generate from /dev/zero on stdin",
    "train on a file without newlines",
]


@pytest.mark.parametrize("name", NOT_REGULAR)
def test_a_fifo_a_device_or_a_directory_is_refused_unread(outcomes, name):
    outcome = outcomes[name]
    assert_one_sentence(outcome["code"], outcome["stderr"], outcome["says"])
    assert "encdec reads only regular files" in outcome["stderr"]
    assert outcome["unchanged"]


@pytest.mark.parametrize("name", TOO_LONG)
def test_a_line_over_its_limit_is_refused_holding_about_the_limit(outcomes, name):
    """512 MiB without a newline (or /dev/zero on stdin): refused by line 1, the memory grown far less than that."""
    outcome = outcomes[name]
    assert_one_sentence(outcome["code"], outcome["stderr"], outcome["says"])
    assert outcome["grew_mib"] < 160, outcome["grew_mib"]
    assert outcome["unchanged"]


@pytest.mark.parametrize(
    ("reader", "limit", "name"),
    [
        ("generate input", MAX_INPUT_LINE_BYTES, "MAX_INPUT_LINE_BYTES"),
        ("plain corpus", MAX_CORPUS_LINE_BYTES, "MAX_CORPUS_LINE_BYTES"),
        ("gzip corpus", MAX_CORPUS_LINE_BYTES, "MAX_CORPUS_LINE_BYTES"),
    ],
)
def test_a_line_of_the_limit_is_read_and_one_byte_more_is_refused(tmp_path, reader, limit, name):
    """The limit counts a line's bytes without its "\\n" or "\\r\\n"; the line number in the error is the line's."""

    def read(data: bytes) -> list[str]:
        if reader == "generate input":
            return read_input_lines(io.BytesIO(data), "inputs")
        path = tmp_path / "corpus"
        path.write_bytes(gzip.compress(data, compresslevel=1) if reader == "gzip corpus" else data)
        return [line for _, line in iter_text_lines(path)]

    fits = b"x" * limit
    assert read(b"a\r\n" + fits + b"\r\n") == ["a", fits.decode()]
    with pytest.raises(DataError, match=rf"line 2 is longer than {limit:,} bytes.*{name}"):
        read(b"a\n" + fits + b"y\n")


SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]
ODD_LINES = ["once" + "".join(SEPARATORS) + "upon", "a\x0ctime\u2028there", "was\ra girl"]


@pytest.mark.parametrize("route", ["generate -i", "generate stdin", "corpus text lines", "corpus tsv"])
def test_lines_end_at_newline_alone(route, tmp_path, monkeypatch, capsys):
    """Form feeds, U+2028 and their kind stay inside a line: as many inputs, documents or pairs out as lines in."""
    data = ("\r\n".join(ODD_LINES) + "\n").encode()  # "\r\n" ends a line, a lone "\r" does not
    path = tmp_path / "lines.txt"
    if route.startswith("generate"):
        path.write_bytes(data)
        if route == "generate stdin":
            monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))  # its text layer splits at "\r"
        source = str(path) if route == "generate -i" else "-"
        assert main(["generate", str(FIXTURE_RUN), "-i", source, "--format", "jsonl", "--max-new-tokens", "1"]) == 0
        out = capsys.readouterr().out
        assert "\u2028" not in out and "\u2029" not in out  # escaped: a JavaScript or splitlines reader keeps records
        got = [json.loads(line)["input"] for line in out.split("\n") if line]
    elif route == "corpus text lines":
        path.write_bytes(data)
        got = list(read_corpus("text", [path], unit="line"))
    else:
        path.write_bytes(("\n".join(f"{line}\t{line}" for line in ODD_LINES) + "\n").encode())
        got = [source for source, _ in read_corpus("tsv", [path])]
    assert got == [line.strip() if route.startswith("corpus") else line for line in ODD_LINES]


def corpus_files(tmp_path: Path, fmt: str) -> list[Path]:
    """2,000 records of `fmt`, gzip-compressed: the damage below lies far past the first record."""
    n = range(2000)
    texts = {
        "tinystories": "".join(f"Story {i} begins.\nIt ends.\n<|endoftext|>\n" for i in n),
        "instruct": "".join(f"Summary: s{i}.\nStory: Story {i}.\n<|endoftext|>\n" for i in n),
        "text": "".join(f"paragraph {i}\n\n" for i in n),
        "jsonl": "".join(json.dumps({"text": f"text {i}"}) + "\n" for i in n),
        "jsonl-pairs": "".join(json.dumps({"dialogue": f"d {i}", "summary": f"s {i}"}) + "\n" for i in n),
        "tsv": "".join(f"source {i}\ttarget {i}\n" for i in n),
        "parallel": "".join(f"line {i}\n" for i in n),
    }
    texts["instruct-text"] = texts["instruct"]
    names = ["a.en.gz", "a.de.gz"] if fmt == "parallel" else ["corpus.gz"]
    paths = [tmp_path / name for name in names]
    for path in paths:
        path.write_bytes(gzip.compress(texts[fmt].encode(), mtime=0))
    return paths


DAMAGES = {
    "truncated": (lambda data: data[: len(data) * 2 // 3], "Compressed file ended before the end-of-stream"),
    "wrong checksum": (lambda data: data[:-8] + bytes([data[-8] ^ 1]) + data[-7:], "CRC check failed"),
    "trailing garbage": (lambda data: data + b"not gzip", "Not a gzipped file"),
    "zeroed body": (lambda data: data[:20] + bytes(len(data) - 28) + data[-8:], "Error -3 while decompressing data"),
}
FORMATS = ["tinystories", "instruct", "instruct-text", "text", "jsonl", "jsonl-pairs", "tsv", "parallel"]


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_damaged_gzip_corpus_is_refused_before_its_first_record(tmp_path, fmt, damage):
    """Checked to its end before use: even a reader that takes one record (data.max_documents) is refused."""
    paths = corpus_files(tmp_path, fmt)
    spoil, reason = DAMAGES[damage]
    paths[-1].write_bytes(spoil(paths[-1].read_bytes()))
    says = rf"{re.escape(paths[-1].name)} cannot be read as gzip after line \d+ \({reason}"
    with pytest.raises(DataError, match=says):
        next(iter(read_corpus(fmt, paths)))


def test_training_on_the_head_of_a_truncated_gzip_corpus_is_one_sentence(tmp_path, capsys):
    """The audit's case: data.max_documents reads 60 stories, the damage is past them; nothing is trained."""
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(STORIES.read_bytes()[: STORIES.stat().st_size // 2])
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    code = main(["train", str(config), "--out", str(tmp_path / "out"), "--set", f"data.train=[{cut}]"])
    assert_one_sentence(code, capsys.readouterr().err, f"{cut} cannot be read as gzip after line")
    assert not list((tmp_path / "out").glob("checkpoints/*"))


@pytest.mark.parametrize(
    ("compression", "compress"),
    [("bzip2", bz2.compress), ("xz", lzma.compress), ("zstd", lambda data: b"\x28\xb5\x2f\xfd" + data)],
)
def test_a_compression_encdec_does_not_read_is_named(tmp_path, compression, compress):
    path = tmp_path / "corpus.txt.z"
    path.write_bytes(compress(b"one story\n" * 100))
    with pytest.raises(DataError, match=rf"corpus\.txt\.z is {compression}-compressed; encdec reads plain or gzip"):
        list(read_corpus("text", [path]))


@pytest.mark.parametrize(
    ("fmt", "options", "text", "says"),
    [
        ("tinystories", {}, "a short line\n", "line 10 makes a story of more than 1,000 characters"),
        ("instruct-text", {}, "Story: a short line\n", "line 10 makes a story"),
        ("text", {"unit": "paragraph"}, "a short line\n", "line 10 makes a paragraph of more than 1,000 characters"),
        ("text", {"unit": "file"}, "a short line\n\n", "line 19 makes a file document"),
    ],
)
def test_a_document_gathered_from_lines_over_its_limit_is_refused(tmp_path, monkeypatch, fmt, options, text, says):
    """A file without its separators is not gathered into one huge document (limit lowered to 1,000 here)."""
    monkeypatch.setattr("encdec.data.corpora.MAX_DOCUMENT_CHARS", 1000)
    path = tmp_path / "corpus.txt"
    path.write_text(("x" * 90 + text) * 100)
    with pytest.raises(DataError, match=rf"corpus\.txt {says}.*MAX_DOCUMENT_CHARS"):
        list(read_corpus(fmt, [path], **options))


def test_a_gzip_bomb_is_refused_before_it_is_decompressed_whole(tmp_path):
    """A small file that decompresses to 64 MiB of zeros: refused by the check, within MAX_CORPUS_LINE_BYTES."""
    path = tmp_path / "bomb.gz"
    with gzip.GzipFile(path, "wb", compresslevel=1) as compressor:
        for _ in range(64):
            compressor.write(bytes(1 << 20))
    assert path.stat().st_size < 1 << 20
    with pytest.raises(DataError, match=r"bomb\.gz line 1 is longer than 16,777,216 bytes once decompressed"):
        list(read_corpus("text", [path]))


class Endless:
    """stdin that never ends (`yes | encdec generate`), stopping the test after far more lines than the bound."""

    def __init__(self, line: bytes, most: int):
        self.line, self.left = line, most

    def readline(self, size: int = -1) -> bytes:
        self.left -= 1
        assert self.left > 0, "read far past the bound"
        return self.line


@pytest.mark.parametrize(
    ("limit", "line", "says"),
    [
        ("MAX_INPUTS", b"yes\n", "stdin holds more than 1,000 inputs (MAX_INPUTS)"),
        ("MAX_INPUT_BYTES", b"y" * 999 + b"\n", "stdin holds more than 1,000 bytes of inputs (MAX_INPUT_BYTES)"),
    ],
)
def test_generate_inputs_are_bounded_in_all(monkeypatch, limit, line, says):
    """The inputs are held together, so their number and bytes are bounded too (lowered to 1,000 here)."""
    monkeypatch.setattr(reading, limit, 1000)
    with pytest.raises(DataError, match=rf"^{re.escape(says)}; split it"):
        read_input_lines(Endless(line, 100_000), "stdin")
