"""optimizer.kind: AdamW or T5's Adafactor; every step logs its gradient norm."""

import math

import pytest

from encdec.cli import main
from encdec.training.checkpoint import latest_checkpoint, load_checkpoint
from encdec.training.metrics import read_metrics

FAST = ["training.steps=8", "output.save_interval=4", "evaluation.interval=4", "model.dropout=0.0", "schedule.kind=constant"]


def train(tiny_config, run, *overrides) -> int:
    return main(["train", str(tiny_config), "--out", str(run), *(a for o in [*FAST, *overrides] for a in ("--set", o))])


def records(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


def test_adafactor_keeps_factored_second_moments_and_learns(tmp_path, tiny_config):
    assert train(tiny_config, tmp_path / "run", "optimizer.kind=adafactor", "optimizer.lr=1e-2") == 0
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["optimizer"]["state"]
    kinds = {frozenset(entry) - {"step"} for entry in state.values()}
    assert frozenset({"row_var", "col_var"}) in kinds  # matrices: a row and a column statistic, no exp_avg
    assert all("exp_avg" not in entry for entry in state.values())
    losses = [r["loss"] for r in records(tmp_path / "run")]
    assert losses[-1] < losses[0] - 0.5


def test_adafactor_runs_resume_bitwise(tmp_path, tiny_config):
    assert train(tiny_config, tmp_path / "full", "optimizer.kind=adafactor") == 0
    assert train(tiny_config, tmp_path / "cut", "optimizer.kind=adafactor", "training.steps=4") == 0
    assert main(["train", str(tiny_config), "--out", str(tmp_path / "cut"), "--resume",
                 *(a for o in [*FAST, "optimizer.kind=adafactor"] for a in ("--set", o))]) == 0  # fmt: skip
    assert [r["loss"] for r in records(tmp_path / "cut")] == [r["loss"] for r in records(tmp_path / "full")]


def test_an_unknown_optimizer_is_one_sentence(tmp_path, tiny_config, capsys):
    assert train(tiny_config, tmp_path / "run", "optimizer.kind=sgd") == 2
    assert "optimizer.kind must be one of adamw, adafactor, got 'sgd'" in capsys.readouterr().err


@pytest.mark.parametrize("clip", [1.0, 0.0], ids=["clipped", "unclipped"])
def test_every_step_logs_the_gradient_norm_before_clipping(tmp_path, tiny_config, clip):
    assert train(tiny_config, tmp_path / "run", f"training.clip_norm={clip}", "optimizer.lr=5e-2") == 0
    norms = [r["grad_norm"] for r in records(tmp_path / "run")]
    assert len(norms) == 8 and all(math.isfinite(n) and n > 0 for n in norms)
    if clip:
        assert max(norms) > clip  # the logged norm is the one before clipping
