"""TinyStoriesInstruct from the Hub, whose rows are single lines of its text file: regrouped into records,
the formats `instruct-records` and `instruct-text` (and `instruct`) give the documents (and pairs) a local
copy of the same text gives, in memory and streamed. The Hub is an offline `datasets` cache laid out here."""

import json

import pytest
from hub_cache_kit import cache_hub_dataset

from encdec.data.formats import read_corpus
from encdec.data.hub import (
    TINYSTORIES_INSTRUCT,
    iter_hub_instruct_pairs,
    iter_hub_instruct_texts,
    iter_hub_stories,
    load_hub_dataset,
)
from encdec.errors import DataError
from encdec.training.data_sections import DataSection, ObjectiveSection
from encdec.training.run_config import RunConfig
from encdec.training.run_data import read_items, stream_opener

datasets = pytest.importorskip("datasets")

FORMATS = ("instruct-records", "instruct-text")

# A separator inside a line, a line of spaces inside a story, a record without a Summary.
VALIDATION_RECORDS = (
    "Summary: A dog finds a ball.\nStory: The dog ran. It found a ball.<|endoftext|>Features: Twist\n"
    "Words: red, hat\nStory: Mia lost her red hat.\n  \nThen she found it.  \n<|endoftext|>\n"
)


def cache_line_rows(tmp_path, repo_id: str, texts: dict[str, str]) -> dict:
    """`repo_id` in the offline cache with a split per text, its rows the lines `datasets`' text builder
    makes of it (as the Hub serves TinyStoriesInstruct); returns {split: the local file of that text}."""
    files, rows = {}, {}
    for split, text in texts.items():
        files[split] = tmp_path / f"{split}.txt"
        files[split].write_text(text)
        lines = load_hub_dataset(repo_id, split=split, data_files=str(files[split]), cache_dir=tmp_path / "text")
        rows[split] = tmp_path / f"{split}.jsonl"
        rows[split].write_text("".join(json.dumps(row) + "\n" for row in lines))
    cache_hub_dataset(tmp_path / "hf", repo_id, rows)
    return files


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """HF_HOME at tmp_path/hf, read in this process with the Hub switched off."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def instruct_hub(tmp_path, offline_hub, instruct_text) -> dict:
    """roneneldan/TinyStoriesInstruct (train, validation) in the offline cache; {split: its local file}."""
    return cache_line_rows(tmp_path, TINYSTORIES_INSTRUCT, {"train": instruct_text, "validation": VALIDATION_RECORDS})


def local(format: str, files: dict) -> list[list]:
    """The items of each split's local file, read by the local reader of `format`."""
    return [list(read_corpus(format, [path])) for path in files.values()]


def run_config(format: str, **data) -> RunConfig:
    section = DataSection(
        **{"format": format, "train": ["/absent/instruct.txt"], "hub_name": TINYSTORIES_INSTRUCT, **data}
    )
    return RunConfig(data=section, objective=ObjectiveSection(kind="seq2seq" if format == "instruct" else "ul2"))


@pytest.mark.parametrize("format", FORMATS)
def test_hub_line_rows_regroup_into_the_documents_of_the_local_file(instruct_hub, format):
    hub = [list(iter_hub_instruct_texts(load_hub_dataset(TINYSTORIES_INSTRUCT, split=s), format)) for s in instruct_hub]
    assert hub == local(format, instruct_hub)
    train_rows = load_hub_dataset(TINYSTORIES_INSTRUCT, split="train")
    assert len(hub[0]) == 3 and len(train_rows) == 18  # a document per record, not per row
    assert len(list(iter_hub_stories(train_rows))) > 3  # read a row each, the lines were documents


def test_records_split_at_a_separator_inside_a_line_and_keep_their_lines(instruct_hub):
    rows = load_hub_dataset(TINYSTORIES_INSTRUCT, split="validation")
    assert list(iter_hub_instruct_texts(rows, "instruct-records")) == [
        "Summary: A dog finds a ball.\nStory: The dog ran. It found a ball.",
        "Features: Twist\nWords: red, hat\nStory: Mia lost her red hat.\n\nThen she found it.",
    ]
    assert list(iter_hub_instruct_texts(rows, "instruct-text"))[0] == "The dog ran. It found a ball."


def test_hub_pairs_are_the_local_instruct_pairs(instruct_hub):
    hub = [list(iter_hub_instruct_pairs(load_hub_dataset(TINYSTORIES_INSTRUCT, split=s))) for s in instruct_hub]
    assert hub == local("instruct", instruct_hub) and len(hub[1]) == 1


@pytest.mark.parametrize("max_documents", [None, 2])  # 2: read_hub streams the first rows
@pytest.mark.parametrize("format", [*FORMATS, "instruct"])
def test_a_run_without_its_local_files_reads_the_hub_by_its_format(instruct_hub, format, max_documents):
    expected = [items[:max_documents] for items in local(format, instruct_hub)]
    assert list(read_items(run_config(format, max_documents=max_documents))) == expected


@pytest.mark.parametrize("format", FORMATS)
def test_a_streamed_run_reads_the_same_hub_documents(instruct_hub, format):
    cfg = run_config(format, streaming=True)
    assert [list(stream_opener(cfg, split)()) for split in ("train", "val")] == local(format, instruct_hub)


def test_plain_stories_on_the_hub_as_records_are_refused_naming_the_dataset_and_record(tmp_path, offline_hub):
    stories = "Once upon a time: a cat.\n<|endoftext|>\nA dog ran.\n<|endoftext|>\n"
    cache_line_rows(tmp_path, "acme/stories", {"train": stories, "validation": stories})
    cfg = run_config("instruct-records", hub_name="acme/stories")
    with pytest.raises(DataError, match=r"dataset acme/stories split train record 1 has no line starting with Feat"):
        read_items(cfg)
