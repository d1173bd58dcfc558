"""Every corpus format in one table: its reader, whether it yields pairs or texts, and the options it takes.

The run config's data section (data.format and its option keys), `encdec evaluate --data` and
`encdec data prepare` read formats only through FORMATS and ReaderOptions, so a new format is one
entry here (with its reader in corpora.py) and every surface takes it, its options with it:

    Format("tsv", iter_tsv_pairs, pairs=True, holds="source<TAB>target a line")

A reader option is declared once, as a field of ReaderOptions (its type, default and help): the
data section holds it under that name (data.source_field), the commands as a flag (--source-field).
An option given to a format whose reader does not take it is one sentence naming the format.
"""

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from encdec.data.corpora import (
    LIST_MODES,
    iter_instruct_pairs,
    iter_instruct_record_texts,
    iter_instruct_stories,
    iter_jsonl_pairs,
    iter_jsonl_texts,
    iter_parallel,
    iter_plain_text,
    iter_tinystories,
    iter_tsv_pairs,
    with_text,
)
from encdec.data.speech import iter_speech_jsonl, iter_speech_tsv
from encdec.errors import ConfigError, DataError
from encdec.schema import Satisfies, short

MAX_SEPARATOR_CHARS = 16


def _help(text: str) -> dict:
    return {"help": text}


def short_text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_SEPARATOR_CHARS


@dataclass
class ReaderOptions:
    """What a format's reader may be told, each option declared once: type, default and help. The run
    config's data section holds these fields (data.text_field); the commands take them as --text-field."""

    text_field: str = field(default="text", metadata=_help("the field that holds a text"))
    source_field: str = field(default="dialogue", metadata=_help("the field that holds a source"))
    target_field: str = field(default="summary", metadata=_help("the field that holds a target (reference)"))
    source_list: Literal[LIST_MODES] = field(  # a field that is a list of strings: join its items,
        default="join", metadata=_help("a source that is a list of texts: join, first or each (a pair per item)")
    )
    target_list: Literal[LIST_MODES] = field(  # take the first, or make a pair of each (several references)
        default="join", metadata=_help("a target that is a list of texts: join, first or each (several references)")
    )
    list_separator: Annotated[str, Satisfies(short_text, f"a text of at most {MAX_SEPARATOR_CHARS} characters")] = (
        field(default=" ", metadata=_help("what joins a list's items"))
    )
    audio_field: str = field(default="audio", metadata=_help("the field that holds a recording's path"))
    header: bool = field(default=False, metadata=_help("the first line of each file names its columns: skip it"))


OPTION_NAMES = tuple(f.name for f in dataclasses.fields(ReaderOptions))
OPTION_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ReaderOptions)}
FIELD_OPTIONS = tuple(name for name in OPTION_NAMES if name not in ("header", "audio_field"))  # a record's fields
PAIR_OPTIONS = ("source_field", "target_field", "source_list", "target_list", "list_separator")


@dataclass(frozen=True)
class Format:
    """One corpus format: how its files are read and what they yield."""

    name: str
    read: Callable[..., Iterator] | None  # (path, **options) -> items of one file; None: not read from files
    pairs: bool | None  # (source, target) pairs, or texts; None: whichever the objective asks for
    holds: str  # what a file of it holds, in words
    options: tuple[str, ...] = ()  # the ReaderOptions its reader takes
    files: int | None = None  # the number of files it is read from together (parallel: 2); None: each alone
    audio: bool = False  # its pairs' sources are recordings (data.speech), read by the transcription objective


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("tinystories", iter_tinystories, False, "documents separated by <|endoftext|>"),
        Format("text", iter_plain_text, False, "paragraphs separated by blank lines"),
        Format("jsonl", iter_jsonl_texts, False, "one JSON object a line", ("text_field",)),
        Format("instruct-text", iter_instruct_stories, False, "TinyStoriesInstruct records: their stories"),
        Format("instruct-records", iter_instruct_record_texts, False, "TinyStoriesInstruct records, whole"),
        Format("instruct", iter_instruct_pairs, True, "TinyStoriesInstruct records: (story, summary) pairs"),
        Format("jsonl-pairs", iter_jsonl_pairs, True, "one JSON object a line", PAIR_OPTIONS),
        Format("tsv", iter_tsv_pairs, True, "source<TAB>target a line", ("header",)),
        Format("parallel", iter_parallel, True, "two files of aligned lines: source, target", files=2),
        Format(
            "speech-jsonl",
            iter_speech_jsonl,
            True,
            "one JSON object a line: a recording and its transcript",
            ("audio_field", "text_field"),
            audio=True,
        ),
        Format("speech-tsv", iter_speech_tsv, True, "recording path<TAB>transcript a line", ("header",), audio=True),
        Format("datasets", None, None, "a `datasets` dataset (data.dataset)", FIELD_OPTIONS),
    )
}
FILE_FORMATS = tuple(name for name, f in FORMATS.items() if f.read is not None)  # what a command reads
PAIR_FORMATS = tuple(name for name, f in FORMATS.items() if f.pairs and not f.audio)  # text pairs
SPEECH_FORMATS = tuple(name for name, f in FORMATS.items() if f.audio)  # (recording, transcript) pairs
TEXT_FILE_FORMATS = tuple(name for name in FILE_FORMATS if not FORMATS[name].audio)  # what tokens are made of
TEXT_FORMATS = tuple(name for name, f in FORMATS.items() if f.pairs is False)


def files_of(entry: Format) -> str:
    """How many files a format is read from, in words: "two files (source, target)"."""
    count = {1: "one file", 2: "two files", 3: "three files"}.get(entry.files or 1, f"{entry.files} files")
    return count + (f" ({entry.holds.partition(': ')[2]})" if ": " in entry.holds and entry.files else "")


def reader_options(
    format: str,
    given: Mapping[str, object],
    key: Callable[[str], str] = lambda name: name,
    defaults: Mapping[str, object] | None = None,
) -> dict:
    """The options `format`'s reader is called with: those `given`, else `defaults` (a run's data section
    that read the same format), else ReaderOptions' own. A given option (not None) the format does not take
    is one sentence naming the option as `key` spells it ("--source-field", "data.source_field") and the format.
    """
    taken = FORMATS[format].options
    for name, value in given.items():
        if value is not None and name not in taken:
            takers = " or ".join(f.name for f in FORMATS.values() if name in f.options)
            raise ConfigError(f"{key(name)} applies to {key('format')} {takers}, not {format}")
    chosen = {name: OPTION_DEFAULTS[name] for name in taken}
    chosen.update({name: defaults[name] for name in taken if defaults and name in defaults})
    return chosen | {name: value for name, value in given.items() if value is not None}


def options_set(section: ReaderOptions) -> dict:
    """The reader options a config section holds other than their defaults (what its author set)."""
    return {name: getattr(section, name) for name in OPTION_NAMES if getattr(section, name) != OPTION_DEFAULTS[name]}


def read_corpus(format: str, paths: list[str | Path], **options) -> Iterator[str] | Iterator[tuple[str, str]]:
    """The items of `paths` read as `format`: documents for a text format, (source, target) pairs for a pair
    format, each holding text (corpora.with_text: empty ones skipped, a file of nothing else refused). `options`
    go to the reader (reader_options checks a user's; a library call may pass any)."""
    entry = FORMATS.get(format) if isinstance(format, str) else None
    if entry is None or entry.read is None:
        raise DataError(f"corpus format {short(format)} is unknown; choose one of {', '.join(FILE_FORMATS)}")
    if entry.files is not None:
        if len(paths) != entry.files:
            raise DataError(f"format {format!r} needs {files_of(entry)}, got {len(paths)}")
        return with_text(entry.read(*paths, **options), paths[0])
    return (item for path in paths for item in with_text(entry.read(path, **options), path))
