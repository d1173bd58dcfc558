"""Any Hugging Face dataset as a corpus (data.format `datasets`), read through the `datasets` library.

    data.dataset: org/name[@revision]   a Hub dataset (in HF's cache, HF_HOME / HF_HUB_OFFLINE honoured)
                  path/to/directory     a local dataset: `save_to_disk`'s output, or a folder of data files
                  json | csv | parquet | text, or unset: data.train's files (by extension, .gz allowed)
    data.dataset_config                 the dataset's configuration (`datasets`' `name`, e.g. "3.0.0")
    data.train_split / validation_split the splits, with `datasets`' slicing ("train[:10%]")

Rows become encdec's items through the column mapping of the data section: `text_field` for
documents, `source_field` / `target_field` for pairs, a list-valued column turned into texts as
`source_list` / `target_list` say (corpora.field_texts: join, first, each). With `streaming` the
rows are read as they are needed, never all held (training.data's streamed objectives). Needs the
`encdec[hf]` extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from encdec.data.corpora import field_texts
from encdec.data.hub import check_hub_dataset, quiet_loggers
from encdec.errors import DataError
from encdec.schema import short

BUILDERS = {"json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet", "txt": "text", "text": "text"}
SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what `Dataset(Dict).save_to_disk` leaves in its folder


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
        name, options["data_files"] = BUILDERS[dataset] if dataset else builder_of(files), {split: files}
    elif Path(dataset).is_dir() and any((Path(dataset) / m).is_file() for m in SAVED_MARKERS):
        return _load_saved(datasets, Path(dataset), split, streaming)
    elif not Path(dataset).exists():
        name, _, revision = dataset.partition("@")
        options["revision"] = revision or None
        check_hub_dataset(name)
    if config is not None:
        options["name"] = config
    try:
        with quiet_loggers("datasets", "huggingface_hub", "fsspec"):  # a refusal is our one sentence, not their retries
            return datasets.load_dataset(name, **options)
    except Exception as error:  # ConnectionError, FileNotFoundError, DatasetNotFoundError, a bad split, ...
        raise DataError(
            f"dataset {short(dataset or files)} cannot be loaded ({type(error).__name__}: {error})"
        ) from None


def _load_saved(datasets, path: Path, split: str, streaming: bool):
    """Split `split` of a dataset directory `save_to_disk` wrote (a DatasetDict's, or one Dataset's)."""
    try:
        saved = datasets.load_from_disk(str(path))
    except Exception as error:
        raise DataError(f"dataset directory {path} cannot be loaded ({type(error).__name__}: {error})") from None
    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise DataError(f"dataset directory {path} has no split {short(split)}; it has {', '.join(saved)}")
        saved = saved[split]
    elif split != "train":
        raise DataError(f"dataset directory {path} holds one split, read as train; it has no {short(split)}")
    return saved.to_iterable_dataset() if streaming else saved


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
) -> Iterator[str] | Iterator[tuple[str, str]]:
    """The documents (stripped, empty ones dropped) or (source, target) pairs of dataset rows, by the
    column mapping; `where` names the dataset in a refusal."""
    for number, row in enumerate(rows):
        label = f"{where} row {number}"
        if not pairs:
            text = list_separator.join(field_texts(row, text_field, label, "join", list_separator)).strip()
            if text:
                yield text
            continue
        sources = field_texts(row, source_field, label, source_list, list_separator)
        targets = field_texts(row, target_field, label, target_list, list_separator)
        yield from ((source, target) for source in sources for target in targets)
