"""data.format datasets: a Hub dataset (offline, from a cache the tests lay out), a local dataset directory
or local json / csv / parquet / text files become encdec's documents or pairs through the column mapping,
list-valued columns included; the same items in memory and streamed."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hub_cache_kit import cache_hub_dataset, cache_hub_model

from encdec.errors import DataError
from encdec.training.run_config import load_config
from encdec.training.run_data import read_items, stream_opener

datasets = pytest.importorskip("datasets")

DIALOGSUM_TEST = "summarization/dialogsum/dialogsum.test.jsonl.gz"


def scitldr_shaped(shared_data: Path, path: Path, start: int, n: int) -> list[dict]:
    """DialogSum's test dialogues as SciTLDR lays a record out: `source` a list of sentences (the turns),
    `target` a list of reference summaries (DialogSum's three annotators)."""
    with gzip.open(shared_data / DIALOGSUM_TEST, "rt", encoding="utf-8") as handle:
        lines = handle.readlines()[start : start + n]
    records = []
    for line in lines:
        r = json.loads(line)
        records.append({"source": r["dialogue"].split("\n"), "target": [r[f"summary{i}"] for i in (1, 2, 3)]})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def config(tmp_path: Path, data: dict, objective: dict | None = None, **sections) -> Path:
    values = {
        "model": {"preset": "t5-tiny"},
        "tokenizer": {"kind": "byte", "num_sentinels": 8},
        "data": data,
        "objective": objective or {"kind": "seq2seq", "max_source_len": 96, "max_target_len": 32},
        "training": {"steps": 4, "batch_size": 4, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 4, "steps": 1},
        "output": {"plot": False},
        **sections,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.fixture
def hub_home(tmp_path, shared_data, monkeypatch):
    """HF_HOME with acme/scitldr-like (train, validation) in `datasets`' cache, read offline in this process."""
    import huggingface_hub.constants

    home = tmp_path / "hf"
    train, validation = tmp_path / "train.jsonl", tmp_path / "validation.jsonl"
    records = scitldr_shaped(shared_data, train, 0, 60), scitldr_shaped(shared_data, validation, 60, 12)
    cache_hub_dataset(home, "acme/scitldr", {"train": train, "validation": validation})
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return home, records


def scitldr_data(**extra) -> dict:
    return {
        "format": "datasets",
        "dataset": "acme/scitldr",
        "validation_split": "validation",
        "source_field": "source",
        "target_field": "target",
        "source_list": "join",
        "target_list": "each",
        "list_separator": "\n",
        **extra,
    }


def test_a_hub_dataset_with_list_columns_becomes_pairs_by_the_config_alone(hub_home, tmp_path):
    _, (train_records, val_records) = hub_home
    train, val = read_items(load_config(config(tmp_path, scitldr_data())))
    assert len(train) == 3 * len(train_records) and len(val) == 3 * len(val_records)  # a pair per reference
    first = train_records[0]
    assert train[:3] == [("\n".join(s.strip() for s in first["source"]), t) for t in first["target"]]
    first_only, _ = read_items(load_config(config(tmp_path, scitldr_data(target_list="first"))))
    assert first_only[0] == train[0] and len(first_only) == len(train_records)


def test_a_split_slice_and_a_hashed_validation_split(hub_home, tmp_path):
    data = scitldr_data(train_split="train[:20]", validation_split=None, target_list="first", val_fraction=0.25)
    train, val = read_items(load_config(config(tmp_path, data)))
    assert len(train) + len(val) == 20 and val and not set(train) & set(val)


def test_streaming_reads_the_same_items_as_memory(hub_home, tmp_path):
    for data in (scitldr_data(), scitldr_data(validation_split=None, val_fraction=0.2)):
        cfg = load_config(config(tmp_path, {**data, "streaming": True}))
        in_memory = read_items(load_config(config(tmp_path, data)))
        assert [list(stream_opener(cfg, split)()) for split in ("train", "val")] == list(in_memory)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"validation_split": "test"}, r"cannot be loaded \(ValueError: Unknown split \"test\""),
        ({"source_field": "abstract"}, r"dataset acme/scitldr split train row 0 has no field 'abstract' \(its fields"),
        ({"dataset": "acme/absent"}, r"dataset 'acme/absent' cannot be loaded \(ConnectionError"),
    ],
)
def test_a_bad_dataset_setting_is_one_sentence(hub_home, tmp_path, data, message):
    with pytest.raises(DataError, match=message):
        read_items(load_config(config(tmp_path, scitldr_data(**data))))


def test_local_files_read_through_their_builders(tmp_path):
    rows = [{"src": f"source {i}", "tgt": f"target {i}"} for i in range(40)]
    datasets.Dataset.from_list(rows).to_parquet(tmp_path / "pairs.parquet")
    datasets.Dataset.from_list(rows).to_csv(tmp_path / "pairs.csv", index=False)
    with gzip.open(tmp_path / "pairs.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))
    expected = [(r["src"], r["tgt"]) for r in rows]
    for name in ("pairs.parquet", "pairs.csv", "pairs.jsonl.gz"):
        data = {"format": "datasets", "train": [str(tmp_path / name)], "validation": [str(tmp_path / name)]}
        data |= {"source_field": "src", "target_field": "tgt"}
        train, val = read_items(load_config(config(tmp_path, data)))
        assert train == expected and val == expected, name
    (tmp_path / "lines.txt").write_text("one line\n\ntwo lines\n")
    lm = {"kind": "span_corruption", "seq_len": 16}
    data = {"format": "datasets", "train": [str(tmp_path / "lines.txt")], "validation": [str(tmp_path / "lines.txt")]}
    assert read_items(load_config(config(tmp_path, data, lm)))[0] == ["one line", "two lines"]
    with pytest.raises(DataError, match=r"do not share one of the extensions \.json, \.jsonl"):
        read_items(
            load_config(
                config(tmp_path, {**data, "train": [str(tmp_path / "pairs.csv"), str(tmp_path / "lines.txt")]}, lm)
            )
        )


def test_a_saved_dataset_directory(tmp_path):
    rows = {"text": [f"document number {i} of the saved set" for i in range(30)]}
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows), "validation": datasets.Dataset.from_dict({"text": ["held out"]})}
    ).save_to_disk(tmp_path / "saved")
    data = {"format": "datasets", "dataset": str(tmp_path / "saved"), "validation_split": "validation"}
    cfg = load_config(config(tmp_path, data, {"kind": "span_corruption", "seq_len": 16}))
    assert read_items(cfg) == (rows["text"], ["held out"])
    streamed = load_config(config(tmp_path, {**data, "streaming": True}, {"kind": "span_corruption", "seq_len": 16}))
    assert list(stream_opener(streamed, "train")()) == rows["text"]


@pytest.mark.slow
def test_fine_tuning_a_hub_model_on_a_hub_dataset_offline_through_the_cli(tmp_path, shared_data):
    """The recipe of docs/recipes.md: `training.init_from` a Hub id, `data.dataset` a Hub id, both read from
    HF_HOME's caches with HF_HUB_OFFLINE=1, then evaluated and generated from like any run."""
    import torch

    import encdec
    from encdec.interop import export_hf
    from encdec.tokenizers import build_tokenizer

    home = tmp_path / "hf"
    train, validation = tmp_path / "train.jsonl", tmp_path / "validation.jsonl"
    scitldr_shaped(shared_data, train, 0, 60), scitldr_shaped(shared_data, validation, 60, 12)
    cache_hub_dataset(home, "acme/scitldr", {"train": train, "validation": validation})

    def export(directory):
        tokenizer = build_tokenizer("byte", num_sentinels=8)
        torch.manual_seed(0)
        ids = dict(pad_id=tokenizer.pad_id, eos_id=tokenizer.eos_id, decoder_start_id=tokenizer.decoder_start_id)
        export_hf(
            encdec.build_model(encdec.preset("t5-tiny", vocab_size=tokenizer.vocab_size, **ids)), tokenizer, directory
        )

    cache_hub_model(home, "acme/t5-tiny", export)
    path = config(
        tmp_path,
        scitldr_data(),
        training={"steps": 6, "batch_size": 4, "threads": 1, "device": "cpu", "init_from": "acme/t5-tiny"},
    )
    values = yaml.safe_load(path.read_text())
    del values["model"], values["tokenizer"]  # the Hub model's own
    path.write_text(yaml.safe_dump(values))
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "encdec", "train", str(path), "--out", str(tmp_path / "run")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in metrics if m["kind"] == "eval"]
    assert evals and all(m["val_loss"] == m["val_loss"] for m in evals)  # finite, from the dataset's own split
    saved = load_config(tmp_path / "run" / "config.yaml", paths_from_file=False)
    assert saved.data.dataset == "acme/scitldr" and saved.training.init_from == "acme/t5-tiny"
