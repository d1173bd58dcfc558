"""data.dataset org/name@revision under HF_HUB_OFFLINE: the copy `datasets` prepared of that very commit (a commit
hash, or a branch or tag the Hub cache's refs/ name), never whichever copy it prepared last; else one sentence."""

import json

import pytest
from hub_cache_kit import cache_hub_dataset

from encdec.data.datasets_corpus import open_dataset
from encdec.errors import DataError

datasets = pytest.importorskip("datasets")

OLD, NEW, UNCACHED = "a" * 40, "b" * 40, "d" * 40


@pytest.fixture
def rows_cache(tmp_path, monkeypatch):
    """acme/rows prepared at two commits (NEW prepared last), the Hub cache's refs: main -> OLD, v2 -> NEW."""
    import huggingface_hub.constants

    home = tmp_path / "hf"
    for commit, words in ((OLD, "old"), (NEW, "new")):
        data = tmp_path / f"{words}.jsonl"
        data.write_text("".join(json.dumps({"text": f"{words} row {i}"}) + "\n" for i in range(3)))
        cache_hub_dataset(home, "acme/rows", {"train": data}, commit=commit)
    refs = home / "hub" / "datasets--acme--rows" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text(OLD)
    (refs / "v2").write_text(NEW)
    (refs / "gone").write_text(UNCACHED)
    (refs / "linked").symlink_to(refs / "v2")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("revision, words", [(OLD, "old"), (NEW, "new"), ("main", "old"), ("v2", "new")])
def test_an_offline_revision_reads_the_copy_prepared_of_that_commit(rows_cache, revision, words, streaming):
    rows = open_dataset(f"acme/rows@{revision}", "train", streaming=streaming)
    assert [row["text"] for row in rows] == [f"{words} row {i}" for i in range(3)]


def test_no_revision_reads_the_cache_as_datasets_does(rows_cache):
    assert len(list(open_dataset("acme/rows", "train"))) == 3


@pytest.mark.parametrize(
    "revision", ["v9", UNCACHED, OLD[:7], "gone", "linked", "../refs/v2", "./v2", "v2/", "refs/v2", "*"]
)
def test_an_offline_revision_the_cache_cannot_resolve_is_one_sentence(rows_cache, revision):
    with pytest.raises(DataError, match="names no commit, branch or tag prepared in the datasets cache") as error:
        open_dataset(f"acme/rows@{revision}", "train")
    assert "\n" not in str(error.value) and f"acme/rows@{revision}" in str(error.value)


def test_an_offline_revision_of_another_configuration_is_refused(rows_cache):
    with pytest.raises(DataError, match="names no commit"):
        open_dataset(f"acme/rows@{OLD}", "train", config="other")
    assert len(open_dataset(f"acme/rows@{OLD}", "train", config="default")) == 3
