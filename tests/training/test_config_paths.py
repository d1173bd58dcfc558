"""Paths written in a config file are relative to that file, so a config works from any directory."""

import os
from pathlib import Path

import pytest
import yaml
from run_kit import config_beside_runs

from encdec.cli import main
from encdec.errors import ConfigError
from encdec.training.run_config import load_config

REPO = Path(__file__).resolve().parents[2]


def write_config(folder: Path, stories: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    path.write_text(
        yaml.safe_dump({"data": {"format": "tinystories", "train": [stories]}, "tokenizer": {"kind": "byte"}})
    )
    return path


def test_a_relative_data_path_is_read_from_the_config_files_folder(tmp_path, monkeypatch):
    (tmp_path / "project" / "data").mkdir(parents=True)
    (tmp_path / "project" / "data" / "stories.txt").write_text("Once upon a time.\n")
    config = write_config(tmp_path / "project" / "configs", "../data/stories.txt")
    monkeypatch.chdir(tmp_path)  # elsewhere: the path still means the file beside the config's folder
    assert load_config(config).data.train == [str(tmp_path / "project" / "data" / "stories.txt")]


def test_paths_given_with_set_stay_relative_to_the_current_directory(tmp_path, monkeypatch):
    config = write_config(tmp_path / "configs", "/absolute/stories.txt")
    monkeypatch.chdir(tmp_path)
    assert load_config(config, ["data.train=[here.txt]"]).data.train == ["here.txt"]
    assert load_config(config).data.train == ["/absolute/stories.txt"]


def test_a_path_written_relative_to_the_current_directory_names_both_places(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "stories.txt").write_text("Once.\n")
    config = write_config(tmp_path / "configs", "data/stories.txt")  # the old way: relative to where it ran
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    message = str(refused.value)
    assert (
        str(tmp_path / "configs" / "data" / "stories.txt") in message
        and str(tmp_path / "data" / "stories.txt") in message
    )
    assert "write ../data/stories.txt" in message


def test_a_saved_config_of_an_older_run_keeps_its_paths_as_written(tmp_path):
    config = write_config(tmp_path / "run" / "checkpoints" / "step_00000001", "../shared/data/stories.txt")
    assert load_config(config, paths_from_file=False).data.train == ["../shared/data/stories.txt"]


def test_the_shipped_tiny_config_trains_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = [
        "training.steps=1",
        "evaluation.interval=1",
        "training.threads=1",
        "training.device=cpu",
        "data.max_documents=200",
    ]
    assert (
        main(
            [
                "train",
                str(REPO / "configs" / "tiny.yaml"),
                "--out",
                "run",
                *(a for o in overrides for a in ("--set", o)),
            ]
        )
        == 0
    )
    saved = yaml.safe_load(next((tmp_path / "run" / "checkpoints").glob("step_*/config.yaml")).read_text())
    assert all(os.path.isabs(path) for path in saved["data"]["train"])  # saved runs hold absolute paths


def test_init_from_in_a_config_file_is_relative_to_its_folder_like_the_data(tmp_path, monkeypatch):
    """One rule for every path a config file names: from the file's folder; --set paths from the shell's."""
    from encdec.training.run_config import load_config

    config = config_beside_runs(tmp_path, monkeypatch, "main", "training:\n  init_from: ../runs/main\n")
    assert load_config(config).training.init_from == str(tmp_path / "runs" / "main")
    monkeypatch.chdir(tmp_path)
    assert load_config(config, ["training.init_from=runs/main"]).training.init_from == "runs/main"
    config.write_text("training:\n  init_from: runs/main\n")  # written from the working directory
    with pytest.raises(ConfigError, match="paths in a config are relative to its folder"):
        load_config(config)
