"""Checkpoints: a killed run resumes to the same losses, and nothing saved is ever lost."""

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from encdec.cli import main
from encdec.runs.checkpoint import load_checkpoint
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import read_metrics

HANG = 300.0  # seconds: a hang detector, not a speed test; each wait ends as soon as its process gets there


def train_command(config, out, *extra):
    return [sys.executable, "-m", "encdec", "train", str(config), "--out", str(out), *extra]


def losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]


def wait_for_step(run_dir: Path, step: int, process, timeout=HANG):
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if (run_dir / "metrics.jsonl").exists() and any(s >= step for s, _ in losses(run_dir)):
            return
        time.sleep(0.02)
    raise AssertionError(f"the run did not reach step {step}")


def killed_and_resumed(config: Path, tmp_path: Path, device) -> tuple[Path, Path]:
    """`config` trained whole into tmp_path/full, and again into tmp_path/killed, killed (SIGKILL) once it has
    logged a random step from 3 to 10, then resumed to the end: the two run directories."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    exact = ("--set", "training.deterministic=true") if device.type == "cuda" else ()  # CPU runs repeat anyway
    subprocess.run(train_command(config, full, *exact), check=True, capture_output=True)
    kill_at = random.Random().randint(3, 10)
    process = subprocess.Popen(
        train_command(config, killed, *exact), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for_step(killed, kill_at, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert RunDir(killed).latest() is not None
    subprocess.run(train_command(config, killed, "--resume", *exact), check=True, capture_output=True)
    return full, killed


@pytest.mark.slow
def test_a_run_killed_at_a_random_step_resumes_to_the_same_losses(tmp_path, tiny_config, device):
    full, killed = killed_and_resumed(tiny_config, tmp_path, device)
    assert losses(killed) == losses(full)  # bitwise, step for step (dropout on)
    evals = [r for r in read_metrics(full / "metrics.jsonl") if r["kind"] == "eval"]
    assert evals == [r for r in read_metrics(killed / "metrics.jsonl") if r["kind"] == "eval"]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_saves_a_checkpoint_prints_the_exact_resume_command_and_exits_128_plus_it(tmp_path, tiny_config, stop):
    run = tmp_path / "run"
    overrides = ["--set", "training.steps=100000", "--set", "output.save_interval=100000"]
    process = subprocess.Popen(
        train_command(tiny_config, run, *overrides), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_step(run, 3, process)
    process.send_signal(stop)
    out, err = process.communicate(timeout=HANG)
    assert process.returncode == 128 + stop, err  # 130 for Ctrl-C: scripts can tell a stop from success
    assert "Traceback" not in err and "stopped by signal" in out
    step = load_checkpoint(RunDir(run).latest())["state"]["train"]["step"]
    assert step == losses(run)[-1][0] >= 3
    hint = shlex.split(out.split("resume with: ")[1].strip())
    assert hint == ["encdec", "train", str(tiny_config), "--out", str(run), "--resume", *overrides]


SLOW_SAVE = """
import sys, time
from pathlib import Path
import torch
from encdec.runs.checkpoint import save_checkpoint
from encdec.runs.run_dir import RunDir

class SlowTokenizer:  # stands in for the last part of a checkpoint to be written
    def save(self, directory):
        Path(directory).mkdir()
        (Path(directory) / "partial").write_text("x")
        time.sleep(60)

run, step = Path(sys.argv[1]), int(sys.argv[2])
files = {"model": {"w": torch.full((3,), float(step))}, "optimizer": {"state": {}, "param_groups": []},
         "rng": {"torch": torch.get_rng_state()}, "state": {"train": {"step": step}, "data": {}},
         "config": lambda p: p.write_text("{}"), "tokenizer": SlowTokenizer() if step == 2 else None}
if step == 1:
    from encdec.tokenizers import ByteTokenizer
    files["tokenizer"] = ByteTokenizer()
save_checkpoint(RunDir(run), step, files, keep_last=1)
"""


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one_loadable(tmp_path):
    script = tmp_path / "slow_save.py"
    script.write_text(SLOW_SAVE)
    subprocess.run([sys.executable, str(script), str(tmp_path), "1"], check=True)
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path), "2"])
    partial = tmp_path / "checkpoints" / ".step_00000002.tmp" / "tokenizer" / "partial"
    deadline = time.time() + HANG
    while not partial.exists() and time.time() < deadline:
        time.sleep(0.02)
    assert partial.exists()
    process.send_signal(signal.SIGKILL)
    process.wait()
    latest = RunDir(tmp_path).latest()
    assert latest.name == "step_00000001"
    assert torch.equal(load_checkpoint(latest)["model"]["w"], torch.full((3,), 1.0))


@pytest.fixture
def finished_run(tmp_path, tiny_config):
    run = tmp_path / "run"
    subprocess.run(train_command(tiny_config, run, "--set", "training.steps=4"), check=True, capture_output=True)
    return run


def resume(capsys, tiny_config, run):
    code = main(["train", str(tiny_config), "--out", str(run), "--resume", "--set", "training.steps=6"])
    return code, capsys.readouterr().err


def test_a_truncated_checkpoint_is_one_sentence_and_nothing_is_deleted(capsys, tiny_config, finished_run):
    latest = RunDir(finished_run).latest()
    weights = latest.model
    weights.write_bytes(weights.read_bytes()[:100])
    before = sorted(p.name for p in (finished_run / "checkpoints").iterdir())
    code, err = resume(capsys, tiny_config, finished_run)
    assert code == 2 and "is corrupt or truncated" in err and "Traceback" not in err
    assert sorted(p.name for p in (finished_run / "checkpoints").iterdir()) == before


class Payload:
    def __reduce__(self):
        return (os.system, ("touch /tmp/encdec_pwned",))


def test_a_checkpoint_carrying_a_pickle_payload_is_refused_without_running_it(capsys, tiny_config, finished_run):
    latest = RunDir(finished_run).latest()
    torch.save({"state": Payload(), "param_groups": []}, latest.optimizer)
    code, err = resume(capsys, tiny_config, finished_run)
    assert code == 2 and "carries pickled objects other than tensors; refusing to load it" in err
    assert not Path("/tmp/encdec_pwned").exists()


def test_training_into_a_run_with_checkpoints_without_resume_is_refused(capsys, tiny_config, finished_run):
    code = main(["train", str(tiny_config), "--out", str(finished_run)])
    assert code == 2 and "already holds checkpoints; pass --resume" in capsys.readouterr().err
    assert RunDir(finished_run).latest().name == "step_00000004"


def test_keep_last_prunes_old_checkpoints_but_keeps_the_best(finished_run):
    names = sorted(p.name for p in (finished_run / "checkpoints").glob("step_*"))
    best = (finished_run / "checkpoints" / "best").read_text().strip()
    assert names[-1] == "step_00000004" and best in names and len(names) <= 4
    state = json.loads((finished_run / "checkpoints" / names[-1] / "state.json").read_text())
    assert state["train"]["step"] == 4 and state["data"]["step"] == 4
