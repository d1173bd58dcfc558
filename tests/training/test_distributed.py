"""torchrun with 2 processes trains to the losses of 1 process with the same global batch.

On gloo and the CPU by default, whatever `--device` says; with two or more GPUs the
same holds on nccl (to a tolerance: GPU kernels may sum in another order).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import encdec
from encdec.training.metrics import read_metrics

pytestmark = pytest.mark.serial  # process groups stopped on a schedule: alone, not beside other tests

PACKAGE = Path(encdec.__file__).parent  # its frames in a traceback name this folder, wherever it is cloned
COMMON = [
    "--set",
    "training.steps=20",
    "--set",
    "training.grad_accum=2",
    "--set",
    "model.dropout=0.0",
    "--set",
    "schedule.kind=constant",
    "--set",
    "evaluation.interval=10",
    "--set",
    "output.save_interval=10",
]


def train(config, out, processes=1, *extra):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "-m", "encdec"]
    command = (launcher if processes > 1 else [sys.executable, "-m", "encdec"]) + [
        "train",
        str(config),
        "--out",
        str(out),
    ]
    env = dict(os.environ, PYTHONFAULTHANDLER="1")  # a rank that aborts prints every thread's Python stack
    done = subprocess.run(command + COMMON + list(extra), capture_output=True, text=True, timeout=300, env=env)
    causes = [
        line
        for line in done.stderr.splitlines()
        if any(w in line for w in ("Error", "error:", "terminate", "what()", 'File "'))
    ]
    assert done.returncode == 0, "\n".join(causes[:40]) + "\n...\n" + done.stderr[-2000:]  # a rank's own cause first
    return read_metrics(out / "metrics.jsonl")


def train_losses(records):
    return [r["loss"] for r in records if r["kind"] == "train"]


def check_two_processes_match_one(tmp_path, tiny_config, device: str, tolerance: float):
    on = ("--set", f"training.device={device}")
    single = train_losses(train(tiny_config, tmp_path / "single", 1, *on))
    assert len(single) == 20
    for kind in ("ddp", "fsdp"):
        losses = train_losses(train(tiny_config, tmp_path / kind, 2, *on, "--set", f"training.distributed={kind}"))
        assert max(abs(a - b) for a, b in zip(single, losses, strict=True)) < tolerance, kind
    # FSDP state is saved and loaded: 10 steps, then resume to 20, equals the straight run
    resumed = tmp_path / "fsdp-resumed"
    train(tiny_config, resumed, 2, *on, "--set", "training.distributed=fsdp", "--set", "training.steps=10")
    losses = train_losses(train(tiny_config, resumed, 2, *on, "--set", "training.distributed=fsdp", "--resume"))
    assert max(abs(a - b) for a, b in zip(single, losses, strict=True)) < tolerance


@pytest.mark.slow
def test_ddp_and_fsdp_on_two_cpu_processes_match_one_process_and_fsdp_resumes(tmp_path, tiny_config):
    check_two_processes_match_one(tmp_path, tiny_config, "cpu", 1e-5)


@pytest.mark.slow
@pytest.mark.multi_gpu
def test_ddp_and_fsdp_on_two_gpus_match_one_gpu_and_fsdp_resumes(tmp_path, tiny_config):
    check_two_processes_match_one(tmp_path, tiny_config, "cuda", 1e-4)


def test_more_processes_than_gpus_stop_with_one_sentence(tmp_path, tiny_config):
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs for two processes")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "encdec"]
    done = subprocess.run(
        launcher + ["train", str(tiny_config), "--out", str(tmp_path / "run"), "--set", "training.device=cuda"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0  # a process says why in one sentence; torchrun then reports its children failed
    errors = [line for line in done.stderr.splitlines() if line.startswith("encdec: error:")]
    assert 1 <= len(errors) <= 2 and "GPU" in errors[0]  # torchrun may stop the second before it speaks
    assert len(set(errors)) == 1  # the processes that spoke said the same sentence
    assert str(PACKAGE) not in done.stderr  # no traceback through encdec's code


@pytest.mark.slow
def test_ddp_trains_experts_that_get_no_tokens_on_one_process(tmp_path, tiny_config):
    """16 experts and a handful of tokens per process: some expert is idle on some rank at every step."""
    tiny = [
        "--set",
        "training.device=cpu",
        "--set",
        "training.distributed=ddp",
        "--set",
        "model.n_experts=16",
        "--set",
        "objective.seq_len=8",
        "--set",
        "training.batch_size=2",
    ]
    assert len(train_losses(train(tiny_config, tmp_path / "moe", 2, *tiny))) == 20


@pytest.mark.slow
def test_fsdp_in_bf16_computes_in_bf16_and_tracks_the_one_process_bf16_run(tmp_path, tiny_config):
    """FSDP's mixed-precision policy (bf16 parameters for compute, fp32 gradient reduction) against autocast."""
    bf16 = ["--set", "training.device=cpu", "--set", "training.precision=bf16", "--set", "training.steps=6"]
    single = train_losses(train(tiny_config, tmp_path / "single", 1, *bf16))
    sharded = train_losses(train(tiny_config, tmp_path / "fsdp", 2, *bf16, "--set", "training.distributed=fsdp"))
    assert max(abs(a - b) for a, b in zip(single, sharded, strict=True)) < 0.05  # bf16 rounds differently


@pytest.mark.slow
def test_an_ema_of_the_weights_under_ddp_evaluates_as_one_process_does_and_fsdp_refuses_it(tmp_path, tiny_config):
    """training.ema_decay with ema_eval: DDP's validation losses (computed on the moving average) equal one
    process's; FSDP, whose processes hold shards, refuses an EMA of whole weights in one sentence."""
    ema = ["--set", "training.device=cpu", "--set", "training.ema_decay=0.8", "--set", "training.ema_eval=true"]

    def evals(records):
        return [r["val_loss"] for r in records if r["kind"] == "eval"]

    single = train(tiny_config, tmp_path / "single", 1, *ema)
    ddp = train(tiny_config, tmp_path / "ddp", 2, *ema, "--set", "training.distributed=ddp")
    assert max(abs(a - b) for a, b in zip(train_losses(single), train_losses(ddp), strict=True)) < 1e-5
    assert len(evals(single)) == 2 and max(abs(a - b) for a, b in zip(evals(single), evals(ddp), strict=True)) < 1e-5
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "encdec", "train"]
    done = subprocess.run(
        [
            *launcher,
            str(tiny_config),
            "--out",
            str(tmp_path / "fsdp"),
            *COMMON,
            *ema,
            "--set",
            "training.distributed=fsdp",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = {line for line in done.stderr.splitlines() if line.startswith("encdec: error:")}
    assert done.returncode != 0 and len(errors) == 1 and "use DDP, not FSDP" in errors.pop()
    assert str(PACKAGE) not in done.stderr  # no traceback through encdec's code
