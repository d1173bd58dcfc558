import json

import pytest

pytest.importorskip("datasets")

from encdec.data.corpora import iter_tinystories  # noqa: E402
from encdec.data.hub import (
    TINYSTORIES,
    TINYSTORIES_INSTRUCT,
    iter_hub_instruct_pairs,
    iter_hub_stories,
    load_hub_dataset,
)  # noqa: E402
from encdec.errors import DataError  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """The hub cannot be reached here; offline mode makes that fail at once instead of after retries."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_hub_names_are_the_defaults():
    assert load_hub_dataset.__defaults__[0] == TINYSTORIES == "roneneldan/TinyStories"
    assert TINYSTORIES_INSTRUCT == "roneneldan/TinyStoriesInstruct"


def test_tinystories_rows_from_local_json_are_stories(tmp_path, tinystories_path):
    stories = list(iter_tinystories(tinystories_path))[:25]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"text": s}) + "\n" for s in stories))
    dataset = load_hub_dataset(TINYSTORIES, split="train", data_files=str(path), cache_dir=tmp_path / "cache")
    assert list(iter_hub_stories(dataset)) == stories


def test_instruct_rows_are_lines_regrouped_into_pairs(tmp_path, instruct_text):
    path = tmp_path / "instruct.txt"
    path.write_text(instruct_text)
    dataset = load_hub_dataset(
        TINYSTORIES_INSTRUCT, split="validation", data_files=[str(path)], cache_dir=tmp_path / "cache"
    )
    pairs = list(iter_hub_instruct_pairs(dataset))
    assert [summary for _, summary in pairs] == [
        "Sara and Ben play by an oak tree and do not quit.",
        "A cat naps in the sun.",
    ]
    assert pairs[1][0] == "The cat was warm.\n\nIt slept all day."


def test_hub_name_without_network_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="'roneneldan/TinyStories' cannot be loaded from the Hugging Face hub"):
        load_hub_dataset(TINYSTORIES, cache_dir=tmp_path / "cache")


def test_missing_local_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match=r"missing\.jsonl does not exist"):
        load_hub_dataset(data_files=str(tmp_path / "missing.jsonl"))


def test_an_unreachable_hub_is_one_sentence_at_once_without_datasets_retries(tmp_path, monkeypatch):
    """Online mode against an endpoint that refuses connections: refused by the probe, before datasets runs,
    after the probe's own attempts (its HTTP client tries twice), not datasets' 30 s of retries: the attempts
    are counted, which no load on the machine stretches as it stretches seconds."""
    import socket

    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: closed
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets was asked"))
    attempts, connect = [], socket.socket.connect
    monkeypatch.setattr(
        socket.socket, "connect", lambda sock, address: attempts.append(address) or connect(sock, address)
    )
    with pytest.raises(DataError, match="hub cannot be reached for dataset 'roneneldan/TinyStories'.*HF_HUB_OFFLINE"):
        load_hub_dataset(TINYSTORIES, cache_dir=tmp_path / "cache")
    assert 1 <= len(attempts) <= 3, attempts
