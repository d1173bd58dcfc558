"""training.ema_decay: the moving average is what its formula says, and a killed run resumes to the same EMA."""

import random
import signal
import subprocess

import torch
from torch import nn

from encdec.cli import main
from encdec.runs.checkpoint import load_weights
from encdec.runs.open import from_pretrained
from encdec.runs.run_dir import RunDir
from encdec.training.ema import WeightAverage
from tests.training.test_resume import losses, train_command, wait_for_step


def test_decay_0_equals_the_live_weights():
    model = nn.Linear(4, 3)
    ema = WeightAverage(model, 0.0)
    with torch.no_grad():
        model.weight.add_(torch.randn_like(model.weight))
    ema.update(model)
    assert all(torch.equal(ema.shadow[k], v) for k, v in model.state_dict().items())


def test_decay_d_after_k_steps_equals_a_direct_computation():
    torch.manual_seed(0)
    model, d = nn.Linear(5, 2).double(), 0.9
    ema = WeightAverage(model, d)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(7):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        ema.update(model)
        expected = {k: d * expected[k] + (1 - d) * v for k, v in model.state_dict().items()}
    assert all(torch.allclose(ema.shadow[k].double(), expected[k].float().double(), atol=1e-6) for k in expected)


def test_a_killed_run_resumes_to_the_same_losses_and_ema_and_the_ema_exports(tmp_path, tiny_config):
    full, killed = tmp_path / "full", tmp_path / "killed"
    ema = ("--set", "training.ema_decay=0.8")
    subprocess.run(train_command(tiny_config, full, *ema), check=True, capture_output=True)
    process = subprocess.Popen(
        train_command(tiny_config, killed, *ema), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for_step(killed, random.Random().randint(3, 8), process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    subprocess.run(train_command(tiny_config, killed, "--resume", *ema), check=True, capture_output=True)
    assert losses(killed) == losses(full)
    a, b = (load_weights(RunDir(run).latest().ema) for run in (full, killed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bitwise
    live = load_weights(RunDir(full).latest().model)
    assert any(not torch.equal(a[k], live[k]) for k in a)  # an average, not the live weights
    assert main(["average", str(full), "--ema"]) == 0
    model = from_pretrained(full, checkpoint="ema_step_00000012")
    loaded = model.state_dict()
    assert all(torch.equal(loaded[k], a[k]) for k in a)  # float32 weights: the EMA as it was kept


def test_ema_eval_judges_the_average_and_leaves_training_untouched(tmp_path, tiny_config):
    import json

    import pytest

    from encdec.errors import ConfigError
    from encdec.training.metrics import read_metrics
    from encdec.training.run_config import load_config

    live, judged = tmp_path / "live", tmp_path / "judged"
    ema = ["--set", "training.ema_decay=0.8"]
    assert main(["train", str(tiny_config), "--out", str(live), *ema]) == 0
    assert main(["train", str(tiny_config), "--out", str(judged), *ema, "--set", "training.ema_eval=true"]) == 0
    assert losses(live) == losses(judged)  # the average was swapped in and out: the live weights trained alike
    evals = [[r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "eval"] for run in (live, judged)]
    assert [r["val_loss"] for r in evals[0]] != [r["val_loss"] for r in evals[1]]
    assert main(["average", str(judged), "--ema"]) == 0  # the average as a checkpoint, evaluated on its own
    assert main(["evaluate", str(judged), "--checkpoint", "ema_step_00000012", "--samples", "1"]) == 0
    own = json.loads((judged / "eval" / "ema_step_00000012" / "eval.json").read_text())  # its own report
    assert abs(own["scores"]["val_loss"] - evals[1][-1]["val_loss"]) < 1e-6
    with pytest.raises(ConfigError, match="training.ema_eval evaluates the moving average: set training.ema_decay"):
        load_config(tiny_config, ["training.ema_eval=true"])
