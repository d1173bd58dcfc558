"""Every experiment file under configs/experiments names runs whose configs load and check."""

from pathlib import Path

import pytest

from encdec.training.experiments import read_experiment
from encdec.training.run_config import load_config

EXPERIMENTS = sorted((Path(__file__).resolve().parents[2] / "configs" / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_file_runs_load_as_valid_configs(path):
    runs, seeds = read_experiment(path)
    assert runs and (seeds is None or len(set(seeds)) == len(seeds))
    configs = [load_config(run.config, run.overrides) for run in runs]
    budgets = {(c.training.steps, c.training.batch_size, c.objective.seq_len) for c in configs}
    assert len(budgets) == 1, "every run of an experiment trains on the same budget"
    assert len({run.name for run in runs}) == len(runs)


def test_rot5_ablation_changes_one_thing_per_run():
    runs, _ = read_experiment(next(p for p in EXPERIMENTS if p.stem == "rot5_ablation_cpu"))
    models = [load_config(run.config, run.overrides).model for run in runs]
    assert [m.get("positions", {}).get("kind") for m in models] == ["relative", "rope", "rope", "rope", "rope"]
    assert [m.get("n_kv_heads") for m in models] == [4, 4, 2, 2, 2]
    experts = [m.get("experts", {}) for m in models]
    assert [e.get("count", 1) for e in experts] == [1, 1, 1, 4, 4]
    assert experts[3]["aux_loss_coef"] == experts[3]["z_loss_coef"] == 0.0
    assert "aux_loss_coef" not in experts[4]  # the defaults: 0.001 each, as ROT5
