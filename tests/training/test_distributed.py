"""torchrun with 2 processes (gloo, CPU) trains to the losses of 1 process with the same global batch."""

import subprocess
import sys

import pytest

from encdec.training.metrics import read_metrics

COMMON = ["--set", "training.steps=20", "--set", "training.grad_accum=2", "--set", "model.dropout=0.0",
          "--set", "schedule.kind=constant", "--set", "evaluation.interval=10", "--set", "output.save_interval=10"]  # fmt: skip


def train(config, out, processes=1, *extra):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "-m", "encdec"]
    command = (launcher if processes > 1 else [sys.executable, "-m", "encdec"]) + ["train", str(config), "--out", str(out)]
    done = subprocess.run(command + COMMON + list(extra), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return read_metrics(out / "metrics.jsonl")


def train_losses(records):
    return [r["loss"] for r in records if r["kind"] == "train"]


@pytest.mark.slow
def test_ddp_and_fsdp_on_two_processes_match_one_process_and_fsdp_resumes(tmp_path, tiny_config):
    single = train_losses(train(tiny_config, tmp_path / "single"))
    assert len(single) == 20
    for kind in ("ddp", "fsdp"):
        losses = train_losses(train(tiny_config, tmp_path / kind, 2, "--set", f"training.distributed={kind}"))
        assert max(abs(a - b) for a, b in zip(single, losses, strict=True)) < 1e-5, kind
    # FSDP state is saved and loaded: 10 steps, then resume to 20, equals the straight run
    resumed = tmp_path / "fsdp-resumed"
    train(tiny_config, resumed, 2, "--set", "training.distributed=fsdp", "--set", "training.steps=10")
    losses = train_losses(train(tiny_config, resumed, 2, "--set", "training.distributed=fsdp", "--resume"))
    assert max(abs(a - b) for a, b in zip(single, losses, strict=True)) < 1e-5
