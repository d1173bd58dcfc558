import math

import pytest

from encdec.training.optim import build_optimizer, lr_at
from encdec.training.run_config import OptimizerSection, RunConfig, ScheduleSection, TrainingSection


def config(kind, steps=1000, **schedule):
    return RunConfig(
        optimizer=OptimizerSection(lr=9e-4),
        schedule=ScheduleSection(kind=kind, **schedule),
        training=TrainingSection(steps=steps),
    )


def nanogpt_get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """nanoGPT train.py's get_lr, transcribed."""
    if it < warmup_iters:
        return learning_rate * it / warmup_iters
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def test_cosine_equals_nanogpt_get_lr_evaluated_at_step_plus_one():
    cfg = config("cosine", steps=900, warmup_steps=30, decay_steps=700, min_lr=9e-5)
    for step in range(0, 900, 7):
        assert lr_at(step, cfg) == pytest.approx(nanogpt_get_lr(step + 1, 9e-4, 30, 700, 9e-5), rel=1e-12)


def test_linear_warms_up_over_one_percent_then_decays_to_zero():
    cfg = config("linear", steps=1000)  # warmup_fraction 0.01 -> 10 steps
    assert lr_at(0, cfg) == 0.0
    assert lr_at(5, cfg) == pytest.approx(9e-4 * 5 / 10)
    assert lr_at(10, cfg) == pytest.approx(9e-4)
    assert lr_at(505, cfg) == pytest.approx(9e-4 * (1000 - 505) / 990)
    assert lr_at(999, cfg) == pytest.approx(9e-4 / 990)


def test_inverse_sqrt_peaks_at_warmup_and_decays_as_one_over_root_step():
    cfg = config("inverse_sqrt", warmup_steps=100)
    assert lr_at(49, cfg) == pytest.approx(9e-4 * 50 / 100)
    assert lr_at(99, cfg) == pytest.approx(9e-4)
    assert lr_at(399, cfg) == pytest.approx(9e-4 * math.sqrt(100 / 400))


def test_constant_without_warmup_is_constant():
    cfg = config("constant", warmup_steps=0)
    assert {lr_at(s, cfg) for s in (0, 10, 999)} == {9e-4}


def test_weight_decay_applies_to_matrices_only():
    import encdec

    model = encdec.build_model(encdec.preset("transformer-tiny", vocab_size=50))
    optimizer = build_optimizer(model, config("constant"))
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
