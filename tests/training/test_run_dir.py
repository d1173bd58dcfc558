"""A run directory cannot be escaped or shared: names read from files stay inside their directory,
encdec writes and prunes only what it created, and one training at a time holds a run directory."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from encdec.cli import main
from encdec.data.shards import MANIFEST, prepare_shards, read_shards
from encdec.errors import CheckpointError, ConfigError, DataError
from encdec.runs.checkpoint import save_checkpoint
from encdec.runs.run_dir import RunDir
from encdec.tokenizers import MANIFEST_NAME, ByteTokenizer, load_tokenizer
from encdec.training.metrics import MetricsLog
from encdec.training.run_lock import lock_run_dir


def outside_file(tmp_path: Path) -> Path:
    """A file beside the run directory that no operation on the run may touch."""
    victim = tmp_path / "outside" / "precious.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("days of work\n")
    return victim


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def checkpoint_files(step: int) -> dict:
    return {
        "model": {"w": torch.full((3,), float(step))},
        "optimizer": {"state": {}, "param_groups": []},
        "rng": {"torch": torch.get_rng_state()},
        "state": {"train": {"step": step}, "data": {}},
        "config": lambda path: path.write_text("{}"),
        "tokenizer": ByteTokenizer(),
    }


def train(config: Path, run: Path, *extra: str) -> int:
    return main(["train", str(config), "--out", str(run), "--set", "training.steps=2", *extra])


def one_sentence(err: str, *phrases: str) -> None:
    assert err.startswith("encdec: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert all(phrase in err for phrase in phrases), err


# --- files encdec writes in a run directory ---


@pytest.mark.parametrize("name", ["config.yaml", "metrics.jsonl", "curves.png", "summary.json"])
def test_a_run_file_replaced_by_a_symlink_is_refused_and_its_target_untouched(tmp_path, capsys, tiny_config, name):
    victim, run = outside_file(tmp_path), tmp_path / "run"
    run.mkdir()
    (run / name).symlink_to(victim)
    before = fingerprint(victim)
    assert train(tiny_config, run, "--resume") == 2
    one_sentence(capsys.readouterr().err, f"{run / name} is a symlink")
    assert fingerprint(victim) == before


def test_a_symlinked_checkpoints_directory_is_refused_before_anything_is_written(tmp_path, capsys, tiny_config):
    elsewhere, run = tmp_path / "elsewhere", tmp_path / "run"
    old = elsewhere / "step_00000001"
    old.mkdir(parents=True)
    (old / "model.safetensors").write_text("someone else's")
    run.mkdir()
    (run / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    before = fingerprint(old / "model.safetensors")
    with pytest.raises(CheckpointError, match="is a symlink"):
        save_checkpoint(RunDir(run), 5, checkpoint_files(5), keep_last=1)
    assert train(tiny_config, run) == 2
    one_sentence(capsys.readouterr().err, "checkpoints is a symlink")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["step_00000001"]
    assert fingerprint(old / "model.safetensors") == before


def test_evaluate_refuses_a_symlinked_eval_directory_before_it_loads_anything(tmp_path, capsys):
    victim, run = outside_file(tmp_path), tmp_path / "run"
    run.mkdir()
    (run / "eval").symlink_to(victim.parent, target_is_directory=True)
    assert main(["evaluate", str(run)]) == 2
    one_sentence(capsys.readouterr().err, f"{run / 'eval'} is a symlink")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["precious.txt"]


def test_metrics_log_refuses_a_symlink(tmp_path):
    victim = outside_file(tmp_path)
    (tmp_path / "metrics.jsonl").symlink_to(victim)
    before = fingerprint(victim)
    with pytest.raises(CheckpointError, match="is a symlink"):
        MetricsLog(tmp_path / "metrics.jsonl", keep_through_step=3)
    assert fingerprint(victim) == before


# --- pruning deletes only what it created ---


def test_pruning_deletes_only_its_own_step_directories(tmp_path):
    victim, run = outside_file(tmp_path), tmp_path / "run"
    root = run / "checkpoints"
    root.mkdir(parents=True)
    (root / "step_00000000").symlink_to(victim.parent, target_is_directory=True)  # sorts first: pruned first
    foreign = [root / "step_old", root / "step_0000000x", root / ".step_notes.tmp"]
    for directory in foreign:
        directory.mkdir()
        (directory / "keep.txt").write_text("not encdec's")
    (root / "notes.txt").write_text("mine")
    before = fingerprint(victim)
    for step in range(1, 5):
        save_checkpoint(RunDir(run), step, checkpoint_files(step), keep_last=1)
    assert fingerprint(victim) == before and (root / "step_00000000").is_symlink()
    assert all((d / "keep.txt").is_file() for d in foreign) and (root / "notes.txt").read_text() == "mine"
    kept = sorted(p.name for p in root.iterdir() if p.name not in {"step_00000000", "notes.txt", "latest"})
    assert kept == [".step_notes.tmp", "step_00000004", "step_0000000x", "step_old"]


def test_a_symlinked_temporary_is_refused_and_not_followed(tmp_path):
    victim, run = outside_file(tmp_path), tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / ".step_00000001.tmp").symlink_to(victim.parent, target_is_directory=True)
    before = fingerprint(victim)
    with pytest.raises(CheckpointError, match="is a symlink"):
        save_checkpoint(RunDir(run), 1, checkpoint_files(1), keep_last=1)
    assert fingerprint(victim) == before and sorted(p.name for p in victim.parent.iterdir()) == ["precious.txt"]


# --- pointers hold names, not paths ---


@pytest.mark.parametrize("target", ["../../x", "/etc/passwd", "step_1/../../x", "model.safetensors", ""])
def test_a_pointer_that_is_not_a_step_name_is_refused(tmp_path, target):
    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "latest").write_text(target + "\n")
    with pytest.raises(CheckpointError, match="not a step_XXXXXXXX name"):
        RunDir(tmp_path).latest()
    with pytest.raises(CheckpointError, match="not a step_XXXXXXXX name"):
        RunDir(tmp_path).checkpoint("latest")


def test_a_pointer_to_a_symlinked_checkpoint_is_refused(tmp_path, capsys, tiny_config):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_00000001").symlink_to(tmp_path / "outside", target_is_directory=True)
    (run / "checkpoints" / "latest").write_text("step_00000001\n")
    assert train(tiny_config, run, "--resume") == 2
    one_sentence(capsys.readouterr().err, "step_00000001 is a symlink")


def test_a_resume_through_a_hostile_pointer_is_one_sentence(tmp_path, capsys, tiny_config):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("/etc/passwd\n")
    assert train(tiny_config, run, "--resume") == 2
    one_sentence(capsys.readouterr().err, "checkpoint pointer", "not a step_XXXXXXXX name")


# --- shard sets and tokenizers ---


@pytest.fixture
def shards(tmp_path) -> Path:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one story\n\nanother story\n")
    return prepare_shards(tmp_path / "shards", ByteTokenizer(), "text", [corpus], workers=1, progress=False)


@pytest.mark.parametrize(
    "key, value", [("fields", ["../x"]), ("fields", ["../../x"]), ("fields", ["/etc/passwd"]), ("splits", {"../x": {}})]
)
def test_a_shard_manifest_naming_a_path_outside_is_refused(shards, key, value):
    manifest = json.loads((shards / MANIFEST).read_text())
    manifest[key] = value
    (shards / MANIFEST).write_text(json.dumps(manifest))
    split = next(iter(manifest["splits"]))
    with pytest.raises(DataError, match="is not a plain name"):
        read_shards(shards, split)


def test_a_shard_file_that_is_a_symlink_is_refused(shards, tmp_path):
    victim = outside_file(tmp_path)
    (shards / "train.text.bin").unlink()
    (shards / "train.text.bin").symlink_to(victim)
    with pytest.raises(DataError, match="is a symlink"):
        read_shards(shards, "train")


@pytest.mark.parametrize(
    "manifest, phrase",
    [
        ({"kind": "hf", "tokenizer_file": "../x/tokenizer.json"}, "climbs out with '..'"),
        ({"kind": "sentencepiece", "model_file": "/etc/passwd"}, "is an absolute path"),
        ({"kind": "sentencepiece", "model_file": 7}, "model_file must be a string, got 7"),
    ],
)
def test_a_tokenizer_manifest_naming_a_path_outside_is_refused(tmp_path, manifest, phrase):
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=phrase):
        load_tokenizer(tmp_path)


def test_a_tokenizer_file_that_is_a_symlink_is_refused(tmp_path):
    victim = outside_file(tmp_path)
    directory = tmp_path / "tokenizer"
    directory.mkdir()
    (directory / "tokenizer.json").symlink_to(victim)
    (directory / MANIFEST_NAME).write_text(json.dumps({"kind": "hf", "tokenizer_file": "tokenizer.json"}))
    with pytest.raises(DataError, match="is a symlink"):
        load_tokenizer(directory)


# --- one training per run directory ---

HOLD = """
import sys, time
from pathlib import Path
from encdec.runs.run_dir import RunDir
from encdec.training.run_lock import lock_run_dir

with lock_run_dir(RunDir(Path(sys.argv[1]))):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
def test_a_second_train_on_a_busy_out_is_refused_naming_the_holder(tmp_path, tiny_config):
    run = tmp_path / "run"
    with lock_run_dir(RunDir(run)):
        command = [sys.executable, "-m", "encdec", "train", str(tiny_config), "--out", str(run)]
        process = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert process.returncode == 2
    one_sentence(
        process.stderr, f"{run} is in use by encdec train (pid {os.getpid()} on ", "wait for it or choose another --out"
    )
    assert sorted(p.name for p in run.iterdir()) == [".lock"]  # the refused run wrote nothing


@pytest.mark.slow
def test_a_lock_held_by_a_killed_process_is_free_again(tmp_path, tiny_config, capsys):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"in use by encdec train \\(pid {holder.pid} on "):
            with lock_run_dir(RunDir(run)):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert train(tiny_config, run) == 0, capsys.readouterr().err
    assert RunDir(run).latest().name == "step_00000002"
