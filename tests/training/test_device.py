"""Training, evaluation and resume keep every tensor where it belongs, and the device never waits inside a step.

`DeviceCheck` (tests/device_check.py) tags tensors as device or host on a CPU and
fails where CUDA would refuse a mix, so these run in CPU CI; with `--device cuda`
they run on the GPU too.
"""

import pytest
from device_check import DeviceCheck

from encdec.training import load_config, train
from encdec.training.metrics import read_metrics

FAST = ["training.steps=4", "output.save_interval=2", "evaluation.interval=2"]


def train_losses(run):
    return [(r["step"], r["loss"]) for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


@pytest.mark.parametrize("model", [{}, {"model.n_experts=4": None}], ids=["rot5", "rot5-moe"])
def test_train_evaluate_and_resume_never_mix_device_and_host_tensors(tmp_path, tiny_config, model):
    overrides = FAST + list(model)
    with DeviceCheck() as check:
        train(load_config(tiny_config, overrides), tmp_path / "run")
        train(load_config(tiny_config, [*overrides, "training.steps=6"]), tmp_path / "run", resume=True)
    assert check.errors == []
    assert [step for step, _ in train_losses(tmp_path / "run")] == [1, 2, 3, 4, 5, 6]


def test_a_training_step_waits_for_the_device_only_at_log_intervals(tmp_path, tiny_config):
    overrides = [
        "training.steps=10",
        "output.log_interval=5",
        "evaluation.interval=100",
        "output.save_interval=100",
        "training.grad_accum=2",
    ]
    with DeviceCheck() as check:
        train(load_config(tiny_config, overrides), tmp_path / "run")
    loop = (  # the loop's own files, as one trainer.py was: optimizer.step's host counters are attributed to its caller
        "training/trainer.py",
        "training/optimizer_step.py",
        "training/validation.py",
        "training/step_log.py",
        "runs/checkpoint",
    )
    in_steps = [s for s in check.syncs if not s.where.startswith(loop)]
    assert in_steps == [], in_steps  # nothing in the model, the loss or the optimizer step waits
    flushes = {s.where for s in check.syncs if s.where.startswith("training/step_log.py") and s.op.endswith("tolist")}
    step_syncs = [s for s in check.syncs if s.where in flushes]
    assert len(step_syncs) == 3  # steps 1, 5 and 10: one read of the losses per log interval (and the first step)
