"""The Hugging Face `datasets` route to the hub corpora (`roneneldan/TinyStories` and its Instruct set).

The hub names are the real defaults; `data_files` points the same code at local
files (the offline route, and how the tests run it). TinyStories rows are one
story each in a `text` column. TinyStoriesInstruct rows are single LINES of the
record text (its text file read by `datasets`' text builder), so they are regrouped
into records at `<|endoftext|>` as a local file is (corpora.iter_separated) and read
by corpora's record functions: the same pairs, stories or whole records as the local
formats `instruct`, `instruct-text` and `instruct-records`. Needs the `encdec[hf]` extra.

With HF_HUB_OFFLINE set, a Hub id's revision (org/name@revision, a model's or a dataset's) is resolved
from the cache alone by `named_commit`: a full commit hash, or a branch or tag whose ref file the Hub
cache keeps (refs/NAME); the caller then requires that commit's snapshot, or refuses.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from encdec.data.corpora import instruct_record_text, iter_separated, parse_instruct_record
from encdec.errors import DataError, EncdecError
from encdec.safe_paths import inside

logger = logging.getLogger(__name__)

TINYSTORIES = "roneneldan/TinyStories"
TINYSTORIES_INSTRUCT = "roneneldan/TinyStoriesInstruct"
INSTRUCT_TEXT_FORMATS = ("instruct-text", "instruct-records")  # read by iter_hub_instruct_texts
COMMIT = re.compile(r"[0-9a-f]{40}")  # a full commit hash, as the Hub cache names its snapshots
HUB_NAME = r"[A-Za-z0-9][\w.-]*"  # an org's or a repository's name on the Hub: letters, digits, - _ . (no leading dot)


def named_commit(refs: Path, revision: str) -> str | None:
    """The commit `revision` names in a Hub cache whose ref files are in `refs`, read offline: the revision
    itself where it is a full commit hash, else the commit that the branch or tag of that name holds
    (refs/NAME, a plain name inside refs/: no '.', '..' or empty part, no symlink); None where neither."""
    if COMMIT.fullmatch(revision):
        return revision
    if any(part in ("", ".", "..") for part in revision.split("/")):
        return None
    try:
        path = inside(refs, revision, "a revision")
    except EncdecError:  # a symlink on the way: not a ref the cache wrote
        return None
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        text = f.read(128).decode("ascii", errors="replace").strip()
    return text if COMMIT.fullmatch(text) else None


def load_hub_dataset(
    name: str = TINYSTORIES,
    split: str = "train",
    data_files: str | list[str] | None = None,
    cache_dir: str | Path | None = None,
    streaming: bool = False,
):
    """`datasets.load_dataset` for a hub name, or for local files when `data_files` is given.

    Local `.json`/`.jsonl` files use the `json` builder, anything else the `text`
    builder (one row per line). Failures (no network, missing files) become a
    DataError naming the dataset.
    """
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"dataset {name!r} needs the datasets package; install it with `pip install encdec[hf]`"
        ) from None
    kwargs = {"split": split, "streaming": streaming, "cache_dir": str(cache_dir) if cache_dir else None}
    if data_files is not None:
        files = [data_files] if isinstance(data_files, str | Path) else list(data_files)
        files = [str(f) for f in files]
        for file in files:
            if not Path(file).is_file():
                raise DataError(f"data file {file} does not exist")
        builder = "json" if all(".json" in Path(f).name for f in files) else "text"
        source, kwargs["data_files"] = builder, {split: files}
    else:
        source = name
        check_hub_dataset(name)
    try:
        with quiet_loggers("datasets", "huggingface_hub", "fsspec"):  # a refusal is our one sentence, not their retries
            return datasets.load_dataset(source, **kwargs)
    except Exception as error:  # ConnectionError, FileNotFoundError, DatasetNotFoundError, ...
        where = f"local files {kwargs.get('data_files')}" if data_files is not None else "the Hugging Face hub"
        raise DataError(f"dataset {name!r} cannot be loaded from {where} ({type(error).__name__}: {error})") from None


def check_hub_dataset(name: str, timeout: float = 10.0) -> None:
    """DataError at once where the Hub has no dataset `name` or cannot be reached; `datasets` would spend
    30 s on retries first. With HF_HUB_OFFLINE set, nothing is asked and `datasets` reads its cache."""
    import huggingface_hub
    import huggingface_hub.constants  # not loaded by the package itself
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    if huggingface_hub.constants.HF_HUB_OFFLINE:
        return
    try:
        huggingface_hub.HfApi(endpoint=huggingface_hub.constants.ENDPOINT).dataset_info(name, timeout=timeout)
    except RepositoryNotFoundError:
        raise DataError(
            f"the Hugging Face hub has no dataset {name!r} (or it is private and you are not logged in)"
        ) from None
    except HfHubHTTPError:  # gated, rate-limited, ...: datasets says what it needs
        return
    except Exception as error:  # no network, DNS, a timeout
        raise DataError(
            f"the Hugging Face hub cannot be reached for dataset {name!r} ({type(error).__name__}: {error}); "
            "with a copy in the datasets cache, set HF_HUB_OFFLINE=1"
        ) from None


@contextlib.contextmanager
def quiet_loggers(*names: str):
    """Only errors from the loggers `names` while the block runs (their warnings name retries and URLs)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def iter_hub_stories(dataset, text_field: str = "text") -> Iterator[str]:
    """Stripped non-empty stories of a TinyStories-style dataset (one story per row)."""
    for row in dataset:
        text = (row.get(text_field) or "").strip()
        if text:
            yield text


def iter_hub_instruct_records(dataset, text_field: str = "text", where: str = "the dataset") -> Iterator[str]:
    """The record texts of a TinyStoriesInstruct-style dataset whose rows are lines, regrouped at
    `<|endoftext|>` as a local file's lines are (stripped, empty ones dropped); `where` names it in a refusal."""
    lines = ((number, row.get(text_field) or "") for number, row in enumerate(dataset, start=1))
    return iter_separated(lines, where)


def iter_hub_instruct_pairs(dataset, text_field: str = "text", where: str = "the dataset") -> Iterator[tuple[str, str]]:
    """(story, summary) of the records that have both, as the local format `instruct` reads them."""
    records = (parse_instruct_record(text) for text in iter_hub_instruct_records(dataset, text_field, where))
    return ((record.story, record.summary) for record in records if record.story and record.summary)


def iter_hub_instruct_texts(
    dataset, format: str = "instruct-records", text_field: str = "text", where: str = "the dataset"
) -> Iterator[str]:
    """Documents of a TinyStoriesInstruct-style dataset as the local text formats read them: each record
    whole (`instruct-records`, refused where a record has no Instruct key) or its story alone (`instruct-text`)."""
    if format not in INSTRUCT_TEXT_FORMATS:
        raise DataError(f"the Instruct text format {format!r} is unknown; choose {' or '.join(INSTRUCT_TEXT_FORMATS)}")
    records = enumerate(iter_hub_instruct_records(dataset, text_field, where), start=1)
    if format == "instruct-records":
        return (instruct_record_text(text, f"{where} record {number}") for number, text in records)
    stories = (parse_instruct_record(text).story for _, text in records)
    return (story for story in stories if story)
