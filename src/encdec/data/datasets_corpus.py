"""Any Hugging Face dataset as a corpus (data.format `datasets`), read through the `datasets` library.

    data.dataset: org/name[@revision]   a Hub dataset (in HF's cache, HF_HOME / HF_HUB_OFFLINE honoured;
                                        offline, the revision's own prepared copy or a refusal)
                  path/to/directory     a local dataset: `save_to_disk`'s output, or a folder of data files
                  json | csv | parquet | text, or unset: data.train's files (by extension, .gz allowed)
    data.dataset_config                 the dataset's configuration (`datasets`' `name`, e.g. "3.0.0")
    data.train_split / validation_split the splits, with `datasets`' slicing ("train[:10%]")

Rows become encdec's items through the column mapping of the data section: `text_field` for
documents, `source_field` / `target_field` for pairs, a list-valued column turned into texts as
`source_list` / `target_list` say (corpora.field_texts: join, first, each). With `streaming` the
rows are read as they are needed, never all held (training.run_data's streamed objectives). Needs the
`encdec[hf]` extra.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from encdec.data.corpora import field_texts
from encdec.data.hub import HUB_NAME, check_hub_dataset, named_commit, quiet_loggers
from encdec.data.speech import recording_value
from encdec.errors import DataError, listed
from encdec.schema import short

BUILDERS = {"json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet", "txt": "text", "text": "text"}
SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what `Dataset(Dict).save_to_disk` leaves in its folder

# a split as `datasets` reads it (its ReadInstruction): NAME, NAME[FROM:TO] in rows or percents, with an optional
# rounding after a percent slice, several joined by "+"
BOUND = r"-?\d{1,18}%?"
SPLIT_PART = re.compile(
    rf"(?P<name>\w+(?:\.\w+)*)(?:\[(?P<start>{BOUND})?:(?P<stop>{BOUND})?\](?:\((?P<rounding>[a-z_0-9]+)\))?)?",
    re.ASCII,
)
ROUNDINGS = ("closest", "pct1_dropremainder")
SPLIT_SAYS = "a split name, sliced as datasets slices it (train, train[:10%], train[100:200], train[:50%]+test)"


def split_names(spec: str) -> list[str] | None:
    """The split names `spec` reads ("train[:10%]+test": train, test), or None where `datasets` would refuse it:
    a name or slice out of its grammar, a percent beyond 100, rows and percents in one slice, a rounding that is
    not one of ROUNDINGS or not after a percent slice."""
    if not isinstance(spec, str) or not 0 < len(spec) <= 200:
        return None
    names = []
    for part in re.split(r"\s*\+\s*", spec):
        found = SPLIT_PART.fullmatch(part)
        if found is None:
            return None
        bounds = [b for b in (found["start"], found["stop"]) if b is not None]
        percent = [b.endswith("%") for b in bounds]
        if len(set(percent)) > 1 or any(p and abs(int(b[:-1])) > 100 for b, p in zip(bounds, percent, strict=True)):
            return None
        if found["rounding"] is not None and (found["rounding"] not in ROUNDINGS or not any(percent)):
            return None
        names.append(found["name"])
    return names


def is_split(spec: object) -> bool:
    return split_names(spec) is not None


HUB_DATASET = re.compile(rf"(?:{HUB_NAME}/)?{HUB_NAME}")  # org/name, or a canonical dataset's name alone


def builder_of(files: list[str]) -> str:
    """The `datasets` builder for local data files, by their extension (a .gz after it is looked through)."""
    kinds = set()
    for file in files:
        suffixes = [s.lstrip(".").lower() for s in Path(file).suffixes if s.lower() != ".gz"]
        kinds.add(BUILDERS.get(suffixes[-1] if suffixes else "", None))
    if None in kinds or len(kinds) != 1:
        raise DataError(
            f"data files {short([str(f) for f in files])} do not share one of the extensions "
            f"{', '.join('.' + e for e in BUILDERS if e != 'text')}; set data.dataset to json, csv, parquet or text"
        )
    return kinds.pop()


def open_dataset(
    dataset: str | None,
    split: str,
    files: list[str] = (),
    config: str | None = None,
    streaming: bool = False,
):
    """Split `split` of `dataset` (see the module's docstring) as a `datasets` Dataset, or an
    IterableDataset with `streaming`; a failure of any kind is one DataError sentence naming it."""
    try:
        import datasets
    except ImportError:
        raise DataError("data.format datasets needs the datasets package; install encdec[hf]") from None
    files = [str(f) for f in files]
    for file in files:
        if not Path(file).is_file():
            raise DataError(f"data file {file} does not exist")
    options: dict = {"split": split, "streaming": streaming}
    name = dataset
    if dataset is None or dataset in BUILDERS:
        if not files:
            raise DataError(f"data.dataset {dataset or '(unset)'} reads data files; name them in data.train")
        names = sorted(set(split_names(split) or [split]))
        if len(names) > 1:
            raise DataError(f"data files make one split, read as {short(split)}; it names {listed(names)}")
        name, options["data_files"] = BUILDERS[dataset] if dataset else builder_of(files), {names[0]: files}
    elif Path(dataset).is_dir() and any((Path(dataset) / m).is_file() for m in SAVED_MARKERS):
        return _load_saved(datasets, Path(dataset), split, streaming)
    elif not Path(dataset).exists():
        name, _, revision = dataset.partition("@")
        options["revision"] = revision or None
        check_hub_dataset(name)
        if revision and is_offline():  # `datasets` would read whichever copy it prepared last
            return _load_cached_revision(datasets, name, revision, config, split, streaming)
    if config is not None:
        options["name"] = config
    try:
        with quiet_loggers("datasets", "huggingface_hub", "fsspec"):  # a refusal is our one sentence, not their retries
            return undecoded_audio(datasets, datasets.load_dataset(name, **options))
    except Exception as error:  # ConnectionError, FileNotFoundError, DatasetNotFoundError, a bad split, ...
        raise DataError(
            f"dataset {short(dataset or files)} cannot be loaded ({type(error).__name__}: {error})"
        ) from None


def is_offline() -> bool:
    import huggingface_hub.constants  # not loaded by the package itself

    return bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def _load_cached_revision(datasets, name: str, revision: str, config: str | None, split: str, streaming: bool):
    """Split `split` of Hub dataset `name` as commit `revision` prepared it in the datasets cache, read offline:
    the revision a full commit hash, or a branch or tag the Hub cache's refs/ name (data.hub's `named_commit`),
    whose prepared copy (CACHE/org___name/CONFIG/VERSION/COMMIT) is there; else one sentence."""
    import huggingface_hub.constants
    from datasets.naming import camelcase_to_snakecase
    from datasets.packaged_modules.cache.cache import Cache

    if not HUB_DATASET.fullmatch(name):
        raise DataError(f"data.dataset {short(name)} is neither a local path nor a Hub id (org/name[@revision])")
    namespace, _, short_name = name.rpartition("/")
    refs = Path(huggingface_hub.constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}" / "refs"
    commit = named_commit(refs, revision)
    root = Path(datasets.config.HF_DATASETS_CACHE) / "___".join(
        filter(None, [namespace, camelcase_to_snakecase(short_name)])
    )
    prepared_copies = root.glob(f"*/*/{commit}") if commit else []
    found = sorted(p for p in prepared_copies if p.is_dir() and not p.is_symlink() and config in (None, p.parts[-3]))
    if not found:
        raise DataError(
            f"dataset {name}@{revision} names no commit, branch or tag prepared in the datasets cache "
            "(HF_HUB_OFFLINE is set, so a revision is read from the cache alone)"
        )
    configs = sorted({p.parts[-3] for p in found})
    if len(configs) > 1:
        raise DataError(
            f"dataset {name}@{revision} is cached in the configurations {listed(configs)}; set data.dataset_config"
        )
    prepared = found[-1]
    try:
        with quiet_loggers("datasets", "huggingface_hub", "fsspec"):
            builder = Cache(
                cache_dir=str(datasets.config.HF_DATASETS_CACHE),
                dataset_name=short_name,
                repo_id=name,
                config_name=prepared.parts[-3],
                version=prepared.parts[-2],
                hash=commit,
            )
            return builder.as_streaming_dataset(split=split) if streaming else builder.as_dataset(split=split)
    except Exception as error:  # a split it lacks, a damaged copy, ...
        raise DataError(
            f"dataset {name}@{revision} cannot be loaded from {prepared} "
            f"({type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''})"
        ) from None


def _load_saved(datasets, path: Path, split: str, streaming: bool):
    """Split `split` of a dataset directory `save_to_disk` wrote (a DatasetDict's, or one Dataset's)."""
    try:
        saved = datasets.load_from_disk(str(path))
    except Exception as error:
        raise DataError(f"dataset directory {path} cannot be loaded ({type(error).__name__}: {error})") from None
    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise DataError(f"dataset directory {path} has no split {short(split)}; it has {listed(list(saved))}")
        saved = saved[split]
    elif split != "train":
        raise DataError(f"dataset directory {path} holds one split, read as train; it has no {short(split)}")
    saved = undecoded_audio(datasets, saved)
    return saved.to_iterable_dataset() if streaming else saved


def undecoded_audio(datasets, rows):
    """`rows` with each Audio column read undecoded, {"bytes", "path"}: encdec.audio decodes recordings itself
    (soundfile, soxr), so no row needs the decoder `datasets` would call (torchcodec)."""
    features = getattr(rows, "features", None) or {}
    for name, feature in features.items():
        if isinstance(feature, datasets.Audio) and feature.decode:
            rows = rows.cast_column(name, datasets.Audio(decode=False))
    return rows


def dataset_items(
    rows: Iterable[dict],
    where: str,
    pairs: bool,
    text_field: str = "text",
    source_field: str = "source",
    target_field: str = "target",
    source_list: str = "join",
    target_list: str = "join",
    list_separator: str = " ",
    recordings: bool = False,
) -> Iterator[str] | Iterator[tuple[str, str]]:
    """The documents (stripped, empty ones dropped) or (source, target) pairs of dataset rows, by the
    column mapping; `where` names the dataset in a refusal. With `recordings` a pair's source is a recording
    (data.speech): an Audio column's bytes or path, or a column of paths."""
    for number, row in enumerate(rows):
        label = f"{where} row {number}"
        if not pairs:
            text = list_separator.join(field_texts(row, text_field, label, "join", list_separator)).strip()
            if text:
                yield text
            continue
        if recordings:
            sources = [recording_value(row.get(source_field), label, source_field)]
        else:
            sources = field_texts(row, source_field, label, source_list, list_separator)
        targets = field_texts(row, target_field, label, target_list, list_separator)
        yield from ((source, target) for source in sources for target in targets)
