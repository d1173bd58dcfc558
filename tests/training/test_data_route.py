"""The run's data route: local files, or the Hugging Face hub when they are absent."""

import gzip
import logging

import pytest

from encdec.errors import DataError
from encdec.training import run_data
from encdec.training.run_config import load_config


def test_absent_local_files_say_so_and_take_the_hub_dataset(monkeypatch, caplog, tmp_path, tiny_config, shared_data):
    stories = gzip.open(shared_data / "tinystories/tinystories_train_head.txt.gz", "rt").read().split("<|endoftext|>")
    local = tmp_path / "stories.txt"
    local.write_text("\n".join(s.strip().replace("\n", " ") for s in stories[:60]))
    calls = []
    real_loader = run_data.load_hub_dataset

    def offline_hub(name, split, streaming=False):  # the hub, served from a local file by `datasets`
        calls.append((name, split, streaming))
        return real_loader(name, split="train", data_files=str(local))

    monkeypatch.setattr(run_data, "load_hub_dataset", offline_hub)
    cfg = load_config(tiny_config, ["data.train=[/absent/stories.txt]", "data.hub_name=roneneldan/TinyStories"])
    with caplog.at_level(logging.WARNING):
        train, val = run_data.read_items(cfg)
    assert "local data ['/absent/stories.txt'] absent: loading roneneldan/TinyStories" in caplog.text
    assert calls == [("roneneldan/TinyStories", "train", True), ("roneneldan/TinyStories", "validation", True)]
    assert len(train) == 60 and train[0].startswith("One day")


def test_absent_local_files_without_a_hub_name_are_one_sentence(tiny_config):
    cfg = load_config(tiny_config, ["data.train=[/absent/stories.txt]"])
    with pytest.raises(DataError, match="data file /absent/stories.txt does not exist"):
        run_data.read_items(cfg)


def test_an_hf_tokenizer_path_may_name_the_directory_holding_tokenizer_json(tiny_config, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"], show_progress=False)
    backend.train_from_iterator(["once upon a time there was a cat", "the cat sat on the mat"], trainer=trainer)
    (tmp_path / "hf").mkdir()
    backend.save(str(tmp_path / "hf" / "tokenizer.json"))
    cfg = load_config(tiny_config, ["tokenizer.kind=hf", f"tokenizer.path={tmp_path / 'hf'}"])
    from_directory = run_data.build_run_tokenizer(cfg, ())
    cfg = load_config(tiny_config, ["tokenizer.kind=hf", f"tokenizer.path={tmp_path / 'hf' / 'tokenizer.json'}"])
    assert from_directory.encode(["the cat"]) == run_data.build_run_tokenizer(cfg, ()).encode(["the cat"])
    (tmp_path / "empty").mkdir()
    cfg = load_config(tiny_config, ["tokenizer.kind=hf", f"tokenizer.path={tmp_path / 'empty'}"])
    with pytest.raises(DataError, match="is a directory without one; tokenizer.kind hf reads a tokenizer.json file"):
        run_data.build_run_tokenizer(cfg, ())
