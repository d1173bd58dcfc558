"""optimizer.kind: AdamW or T5's Adafactor; every step logs its gradient norm."""

import math

import pytest
from run_kit import sets

from encdec.cli import main
from encdec.runs.checkpoint import load_checkpoint
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import read_metrics

FAST = [
    "training.steps=8",
    "output.save_interval=4",
    "evaluation.interval=4",
    "model.dropout=0.0",
    "schedule.kind=constant",
]


def train(tiny_config, run, *overrides) -> int:
    return main(["train", str(tiny_config), "--out", str(run), *(a for o in [*FAST, *overrides] for a in ("--set", o))])


def records(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


def test_adafactor_keeps_factored_second_moments_and_learns(tmp_path, tiny_config):
    assert train(tiny_config, tmp_path / "run", "optimizer.kind=adafactor", "optimizer.lr=1e-2") == 0
    state = load_checkpoint(RunDir(tmp_path / "run").latest())["optimizer"]["state"]
    kinds = {frozenset(entry) - {"step"} for entry in state.values()}
    assert frozenset({"row_var", "col_var"}) in kinds  # matrices: a row and a column statistic, no exp_avg
    assert all("exp_avg" not in entry for entry in state.values())
    losses = [r["loss"] for r in records(tmp_path / "run")]
    assert losses[-1] < losses[0] - 0.5


def test_adafactor_runs_resume_bitwise(tmp_path, tiny_config):
    assert train(tiny_config, tmp_path / "full", "optimizer.kind=adafactor") == 0
    assert train(tiny_config, tmp_path / "cut", "optimizer.kind=adafactor", "training.steps=4") == 0
    assert (
        main(
            [
                "train",
                str(tiny_config),
                "--out",
                str(tmp_path / "cut"),
                "--resume",
                *(a for o in [*FAST, "optimizer.kind=adafactor"] for a in ("--set", o)),
            ]
        )
        == 0
    )
    assert [r["loss"] for r in records(tmp_path / "cut")] == [r["loss"] for r in records(tmp_path / "full")]


def test_an_unknown_optimizer_is_one_sentence(tmp_path, tiny_config, capsys):
    assert train(tiny_config, tmp_path / "run", "optimizer.kind=sgd") == 2
    assert "optimizer.kind must be one of adamw, adafactor, adamw_scale, got 'sgd'" in capsys.readouterr().err


@pytest.mark.parametrize("clip", [1.0, 0.0], ids=["clipped", "unclipped"])
def test_every_step_logs_the_gradient_norm_before_clipping(tmp_path, tiny_config, clip):
    assert train(tiny_config, tmp_path / "run", f"training.clip_norm={clip}", "optimizer.lr=5e-2") == 0
    norms = [r["grad_norm"] for r in records(tmp_path / "run")]
    assert len(norms) == 8 and all(math.isfinite(n) and n > 0 for n in norms)
    if clip:
        assert max(norms) > clip  # the logged norm is the one before clipping


def scalars(log_dir):
    """{tag: [(step, value), ...]} of a TensorBoard log directory, read with tensorboard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_gets_every_number_of_metrics_jsonl_and_a_resume_replaces_what_followed(tmp_path, tiny_config):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    assert train(tiny_config, run, "training.steps=6", "output.tensorboard=true") == 0
    (run / "checkpoints" / "latest").write_text("step_00000004\n")  # as if killed after the checkpoint at step 4
    assert (
        main(["train", str(tiny_config), "--out", str(run), "--resume", *sets(*FAST, "output.tensorboard=true")]) == 0
    )
    logged, jsonl = scalars(run / "tensorboard"), records(run)
    assert [step for step, _ in logged["train/loss"]] == [r["step"] for r in jsonl] == list(range(1, 9))
    assert [v for _, v in logged["train/loss"]] == pytest.approx([r["loss"] for r in jsonl], rel=1e-6)
    assert {"train/lr", "train/grad_norm", "train/tokens_per_s", "eval/val_loss", "eval/train_loss"} <= set(logged)


def test_asking_for_tensorboard_without_the_package_is_one_sentence(tmp_path, tiny_config, capsys, monkeypatch):
    import encdec.training.setup as setup

    monkeypatch.setattr(setup, "tensorboard_available", lambda: False)
    assert train(tiny_config, tmp_path / "run", "output.tensorboard=true") == 2
    assert "pip install 'encdec[tensorboard]'" in capsys.readouterr().err


def test_adamw_scale_steps_each_parameter_by_its_rms_as_nanot5_does():
    import torch

    from encdec.training.optim import AdamWScale

    torch.manual_seed(0)
    big, small = torch.nn.Parameter(torch.randn(4, 3) * 5.0), torch.nn.Parameter(torch.full((4, 3), 1e-5))
    optimizer = AdamWScale([big, small], lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    grads = [torch.randn(4, 3), torch.randn(4, 3)]
    expected = []
    for p, g in zip((big, small), grads, strict=True):  # step 1 by hand: m = 0.1 g, v = 0.001 g^2
        m, v = 0.1 * g, 0.001 * g * g
        step = 0.1 * (1 - 0.999) ** 0.5 / (1 - 0.9) * max(1e-3, p.detach().pow(2).mean().sqrt().item())
        expected.append((p.detach() - step * m / (v.sqrt() + 1e-8)) * (1 - 0.1 * 0.01))
        p.grad = g
    optimizer.step()
    for p, want in zip((big, small), expected, strict=True):
        torch.testing.assert_close(p.detach(), want)


def test_adamw_scale_trains_a_run(tmp_path, tiny_config):
    assert train(tiny_config, tmp_path / "run", "optimizer.kind=adamw_scale", "optimizer.lr=2e-2") == 0
    losses = [r["loss"] for r in records(tmp_path / "run")]
    assert losses[-1] < losses[0] - 0.5
