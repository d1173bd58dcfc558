"""Corpus readers: documents (str) or (source, target) pairs, streamed line by line.

Every reader opens plain or gzip files transparently (by content, not by
name), decodes UTF-8 line by line so a bad byte is reported with its line, and
raises DataError with one sentence naming the file and line. Readers that find
no document at all raise too: an empty corpus is always a mistake, and so is one whose documents or
pairs are all empty (`with_text`, through which formats.read_corpus reads: a few are skipped). Reading is
bounded (encdec.data.reading): regular files only, lines split at "\n" alone and
at most MAX_CORPUS_LINE_BYTES, documents gathered from lines at most
MAX_DOCUMENT_CHARS, a gzip file checked to its end before it is used.

Formats: TinyStories (`<|endoftext|>`-separated stories), TinyStoriesInstruct
records (`Features:` / `Words:` / `Summary:` / `Story:`: their Story -> Summary pairs,
their stories alone, or the whole records as text), plain text, JSONL (texts or
pairs), line-aligned parallel files, TSV pairs. Which reader a format name means, and the
options each takes, is the table in formats.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from encdec.data.reading import MAX_DOCUMENT_CHARS, iter_text_lines
from encdec.errors import ConfigError, DataError
from encdec.schema import json_number, short

END_OF_TEXT = "<|endoftext|>"
INSTRUCT_KEYS = ("Features", "Words", "Summary", "Random sentence", "Story")
Item = TypeVar("Item")
log = logging.getLogger(__name__)


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its "\n" or "\r\n") of a plain or gzip UTF-8 file, split at "\n" only."""
    return iter_text_lines(Path(path))


class _Document:
    """The lines of one document being gathered; past MAX_DOCUMENT_CHARS it is refused, not held.

    `hint` ends the sentence: what the file probably lacks (a separator, a blank line).
    """

    def __init__(self, path: str | Path, what: str, hint: str):
        self.path, self.what, self.hint = path, what, hint
        self.lines: list[str] = []
        self.size = 0

    def add(self, line: str, number: int) -> None:
        self.size += len(line) + 1
        if self.size > MAX_DOCUMENT_CHARS:
            raise DataError(
                f"{self.path} line {number} makes a {self.what} of more than {MAX_DOCUMENT_CHARS:,} characters "
                f"(MAX_DOCUMENT_CHARS); {self.hint}"
            )
        self.lines.append(line)

    def take(self) -> str:
        """The lines gathered, joined by "\n"; the document starts empty again."""
        text = "\n".join(self.lines)
        self.lines, self.size = [], 0
        return text


def _require_some(items: Iterable[Item], path: str | Path, what: str) -> Iterator[Item]:
    """Pass items through; raise a DataError naming `path` if there were none."""
    empty = True
    for item in items:
        empty = False
        yield item
    if empty:
        raise DataError(f"{path} contains no {what}")


def with_text(items: Iterable[Item], where: str | Path) -> Iterator[Item]:
    """The items that hold text: a document that is not blank, a pair whose source and target both are not.
    The others are skipped, and counted in a warning; where every item is empty there is nothing to learn or
    score (a pair of empty texts trains on EOS alone), and the file is refused."""
    kept = skipped = 0
    pairs = False
    for item in items:
        pairs = not isinstance(item, str)
        if all(part.strip() for part in (item if pairs else (item,))):
            kept += 1
            yield item
        else:
            skipped += 1
    noun, empty = ("pairs", "have an empty source or target") if pairs else ("texts", "are empty")
    if skipped and not kept:
        raise DataError(f"{where} holds no examples: its {skipped:,} {noun} all {empty.replace('are ', '')}")
    if skipped:
        warn_once(f"{where}: {skipped:,} of its {kept + skipped:,} {noun} {empty}, skipped")


@functools.cache
def warn_once(message: str) -> None:
    """Log `message` the first time only: a streamed corpus is read again at every pass."""
    log.warning("%s", message)


def iter_tinystories(path: str | Path, separator: str = END_OF_TEXT) -> Iterator[str]:
    """Stories separated by `separator` lines (TinyStories-train.txt), stripped, empty ones dropped."""
    return _require_some(iter_separated(iter_lines(path), path, separator), path, "stories")


def iter_separated(lines: Iterable[tuple[int, str]], where: str | Path, separator: str = END_OF_TEXT) -> Iterator[str]:
    """The documents of numbered lines, split at each `separator` (anywhere in a line), stripped, empty ones
    dropped: a file's lines or a dataset's line rows alike. `where` names the source in a refusal."""
    document = _Document(where, "story", f"is a {separator!r} separator missing?")
    for number, line in lines:
        while separator in line:
            head, line = line.split(separator, 1)
            document.add(head, number)
            story = document.take().strip()
            if story:
                yield story
        document.add(line, number)
    story = document.take().strip()
    if story:
        yield story


def iter_plain_text(path: str | Path, unit: str = "paragraph") -> Iterator[str]:
    """Documents of a plain text file: one per `line`, per blank-line-separated `paragraph`, or the whole `file`."""
    if unit not in ("line", "paragraph", "file"):
        raise DataError(f"plain text unit {unit!r} is unknown; choose line, paragraph or file")

    def documents() -> Iterator[str]:
        hint = "are paragraphs separated by blank lines?" if unit == "paragraph" else "use unit line or paragraph"
        block = _Document(path, unit if unit == "paragraph" else "file document", hint)
        for number, line in iter_lines(path):
            if unit == "line":
                if line.strip():
                    yield line.strip()
            elif unit == "paragraph" and not line.strip():
                paragraph = block.take()
                if paragraph:
                    yield paragraph
            else:
                block.add(line, number)
        text = block.take()
        if text.strip():
            yield text.strip() if unit == "paragraph" else text

    return _require_some(documents(), path, "text")


@dataclass
class InstructRecord:
    """One TinyStoriesInstruct record; `fields` keeps every `Key: value` seen."""

    story: str = ""
    summary: str = ""
    fields: dict[str, str] = field(default_factory=dict)


def parse_instruct_record(text: str) -> InstructRecord:
    """Parse `Features:` / `Words:` / `Summary:` / `Random sentence:` / `Story:` lines; the story runs to the end."""
    record = InstructRecord()
    key = None
    values: dict[str, list[str]] = {}
    for line in text.split("\n"):
        name, sep, rest = line.partition(":")
        if key != "Story" and sep and name.strip() in INSTRUCT_KEYS:
            key = name.strip()
            values[key] = [rest.strip()]
        elif key is not None:
            values[key].append(line)
    record.fields = {k: "\n".join(v).strip() for k, v in values.items()}
    record.story = record.fields.get("Story", "")
    record.summary = record.fields.get("Summary", "")
    return record


def iter_instruct_records(path: str | Path) -> Iterator[InstructRecord]:
    """Every TinyStoriesInstruct record of a file (records are `<|endoftext|>`-separated)."""
    return (parse_instruct_record(text) for text in iter_tinystories(path))


def iter_instruct_stories(path: str | Path) -> Iterator[str]:
    """The non-empty stories of a TinyStoriesInstruct file, without their other lines."""
    return (record.story for record in iter_instruct_records(path) if record.story)


def iter_instruct_record_texts(path: str | Path) -> Iterator[str]:
    """Each TinyStoriesInstruct record whole, as written (`Features:` ... `Story:` lines, trailing spaces
    dropped): the task data read as unlabeled text, as ROT5 pretrained its mini model on it.

    A record with none of the Instruct keys is refused: the file is then plain stories (format tinystories).
    """
    records = enumerate(iter_tinystories(path), start=1)
    return (instruct_record_text(text, f"{path} record {number}") for number, text in records)


def instruct_record_text(text: str, where: str) -> str:
    """One TinyStoriesInstruct record as written, trailing spaces dropped; refused, naming `where`, when no
    line starts with an Instruct key (plain stories)."""
    lines = [line.rstrip() for line in text.split("\n")]
    keys = {name.strip() for name, sep, _ in (line.partition(":") for line in lines) if sep}
    if not keys & set(INSTRUCT_KEYS):
        raise DataError(
            f"{where} has no line starting with {', '.join(k + ':' for k in INSTRUCT_KEYS)}; "
            "is it a TinyStoriesInstruct file? (plain stories: format tinystories)"
        )
    return "\n".join(lines)


def iter_instruct_pairs(path: str | Path) -> Iterator[tuple[str, str]]:
    """(story, summary) of the records that have both: the summarization pairs ROT5 fine-tuned on."""
    pairs = ((r.story, r.summary) for r in iter_instruct_records(path) if r.story and r.summary)
    return _require_some(pairs, path, "records with both a Story and a Summary")


def _iter_json_objects(path: str | Path) -> Iterator[tuple[int, dict]]:
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        try:  # numbers bounded before they are converted, as a config's are
            record = json.loads(line, parse_int=json_number(int), parse_float=json_number(float))
        except json.JSONDecodeError as error:
            raise DataError(f"{path} line {number} is not valid JSON ({error.msg})") from None
        except (ConfigError, RecursionError) as error:
            reason = str(error) if isinstance(error, ConfigError) else "nests deeper than Python reads"
            raise DataError(f"{path} line {number} {reason}") from None
        if not isinstance(record, dict):
            raise DataError(f"{path} line {number} is not a JSON object")
        yield number, record


LIST_MODES = ("join", "first", "each")  # what a list of strings in a JSON field becomes: see field_texts


def field_texts(record: dict, name: str, where: str, mode: str = "join", separator: str = " ") -> list[str]:
    """Field `name` of a record (a JSON line, a dataset row) as texts: a string is itself; a list of
    strings is joined with `separator` ("join": sentences of one document), its first item ("first":
    several references, keep one) or each item ("each": several references, a pair each). `where`
    names the record in a refusal ("FILE line 3", "dataset X row 3")."""
    value = record.get(name)
    if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        parts = [part.strip() for part in value]
        return {"join": [separator.join(parts)], "first": parts[:1], "each": parts}[mode]
    if not isinstance(value, str):
        problem = "has no field" if value is None else "has a field that is neither text nor a list of texts,"
        raise DataError(
            f"{where} {problem} {short(name)}{' (its fields: ' + short(sorted(record)) + ')' if value is None else ''}"
        )
    return [value]


def _field(record: dict, name: str, path: str | Path, number: int) -> str:
    """Field `name` of a JSON record: a string, or a list of strings joined with spaces."""
    return field_texts(record, name, f"{path} line {number}")[0]


def iter_jsonl_texts(path: str | Path, text_field: str = "text") -> Iterator[str]:
    """The `text_field` of each JSON line."""
    texts = (_field(r, text_field, path, n) for n, r in _iter_json_objects(path))
    return _require_some(texts, path, "records")


def iter_jsonl_pairs(
    path: str | Path,
    source_field: str = "dialogue",
    target_field: str = "summary",
    source_list: str = "join",
    target_list: str = "join",
    list_separator: str = " ",
) -> Iterator[tuple[str, str]]:
    """(source, target) of each JSON line (DialogSum's field names by default); list-valued fields as
    `source_list` / `target_list` say (field_texts), every source with every target where both are "each"."""

    def pairs() -> Iterator[tuple[str, str]]:
        for n, record in _iter_json_objects(path):
            where = f"{path} line {n}"
            sources = field_texts(record, source_field, where, source_list, list_separator)
            targets = field_texts(record, target_field, where, target_list, list_separator)
            yield from ((source, target) for source in sources for target in targets)

    return _require_some(pairs(), path, "records")


def iter_parallel(source_path: str | Path, target_path: str | Path) -> Iterator[tuple[str, str]]:
    """Line i of `source_path` with line i of `target_path` (Multi30k `.en` / `.de`), stripped."""

    def pairs() -> Iterator[tuple[str, str]]:
        sources, targets = iter_lines(source_path), iter_lines(target_path)
        while True:
            source, target = next(sources, None), next(targets, None)
            if source is None or target is None:
                break
            yield source[1].strip(), target[1].strip()
        for extra, name in ((source, source_path), (target, target_path)):
            if extra is not None:
                raise DataError(f"{name} has more lines than its parallel file (line {extra[0]} has no partner)")

    return _require_some(pairs(), source_path, "lines")


def iter_tsv_pairs(
    path: str | Path, source_column: int = 0, target_column: int = 1, header: bool = False
) -> Iterator[tuple[str, str]]:
    """(source, target) columns of a tab-separated file; with `header`, its first line (column names) skipped.
    No line, the header included, holds text in a column more: it would be dropped unread (an empty one, a
    trailing tab, is nothing lost)."""
    need = max(source_column, target_column) + 1

    def pairs() -> Iterator[tuple[str, str]]:
        for number, line in iter_lines(path):
            if not line.strip():
                continue
            columns = line.split("\t")
            if len(columns) < need:
                said = f"{len(columns)} tab-separated column{'s' if len(columns) > 1 else ''}"
                raise DataError(f"{path} line {number} has {said}; {need} are needed")
            extra = next((i for i in range(need, len(columns)) if columns[i].strip()), None)
            if extra is not None:
                raise DataError(
                    f"{path} line {number} has {len(columns)} tab-separated columns where format tsv reads {need}, "
                    f"so column {extra + 1} ({short(columns[extra].strip(), 30)}) would be lost; remove it"
                )
            if not (header and number == 1):
                yield columns[source_column].strip(), columns[target_column].strip()

    return _require_some(pairs(), path, "pairs")


@dataclass(frozen=True)
class PairTemplate:
    """Text templates applied to a (source, target) pair before tokenizing: `{source}` / `{target}` fields."""

    source: str = "{source}"
    target: str = "{target}"

    def apply(self, source: str, target: str) -> tuple[str, str]:
        return self.source.format(source=source), self.target.format(target=target)


def split_hash(key: str, seed: int = 0) -> float:
    """Where an item's text falls in [0, 1): a hash, stable and order-free."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "big") / 2**64


def is_validation(key: str, val_fraction: float, seed: int = 0) -> bool:
    """Whether an item goes to validation, decided by a hash of its text: stable, order-free, streaming."""
    return split_hash(key, seed) < val_fraction


def item_key(item: str | tuple) -> str:
    """The text an item is split by: a document's own, a pair's source (a recording's bytes: their digest)."""
    key = item if isinstance(item, str) else item[0]
    return key if isinstance(key, str) else hashlib.blake2b(key, digest_size=16).hexdigest()


def crossing(hashes: list[float], val_fraction: float) -> int | None:
    """The index of the one item that changes side where the hash split (`split_hash` of each item) of two
    or more items leaves a side empty (a few documents, data.max_documents, at a small val_fraction): the
    item whose hash lies nearest the threshold. None where both sides hold items, as in any corpus of use."""
    validation = sum(h < val_fraction for h in hashes)
    if len(hashes) < 2 or 0 < validation < len(hashes):
        return None
    nearest = min if validation == 0 else max  # the lowest train hash joins validation, or the reverse
    return hashes.index(nearest(hashes))


def split_items(
    items: Iterable[Item], val_fraction: float, seed: int = 0, key: Callable[[Item], str] | None = None
) -> tuple[list[Item], list[Item]]:
    """Deterministic (train, validation) lists for a corpus without a split; pairs split by their source.
    Each side holds an item where there are two or more (`crossing`)."""
    items, key = list(items), key or item_key
    hashes = [split_hash(key(item), seed) for item in items]
    crossed = crossing(hashes, val_fraction)
    train: list[Item] = []
    validation: list[Item] = []
    for i, (item, where) in enumerate(zip(items, hashes, strict=True)):
        (validation if (where < val_fraction) != (i == crossed) else train).append(item)
    return train, validation
