"""The seeds' run configs: `encdec size` gives the seeds' parameter counts exactly, and every file loads."""

from pathlib import Path

import pytest

from encdec.cli import main
from encdec.models import ModelConfig
from encdec.training import load_config

SEEDS = Path(__file__).parents[2] / "configs" / "seeds"


@pytest.mark.parametrize(
    "name,params",
    [
        ("000_mse_embedding_loss_pos_sub", "15,763,500"),  # auto-regressive, MSE embedding loss + pos sub
        ("000_baseline", "16,036,800"),
        ("000_smaller_baseline", "15,441,192"),
        ("000_dropout_baseline", "16,036,800"),
        ("001_mse_encoder_loss", "15,698,400"),  # parallel, MSE encoder loss
        ("001_baseline", "15,850,380"),
    ],
)
def test_size_of_the_full_seed_configs_equals_the_seeds_counts(name, params, capsys):
    assert main(["size", str(SEEDS / f"{name}.yaml")]) == 0
    out = capsys.readouterr().out
    assert "vocabulary 50,257" in out
    assert f"without position embeddings:   {params}\n" in out


def model_config(path: Path) -> ModelConfig:
    cfg = load_config(path)
    return cfg.model.build(cfg.model.get("vocab_size", 260), 0, 1, 0)


@pytest.mark.parametrize("path", sorted(SEEDS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_seed_run_has_a_cpu_version_of_the_same_structure(path):
    full, cpu = model_config(path), model_config(SEEDS / "cpu" / path.name)
    assert cpu.family == full.family and cpu.research == full.research and cpu.dropout == full.dropout
    assert cpu.d_model < full.d_model and cpu.positions.max < full.positions.max
    full_run, cpu_run = load_config(path), load_config(SEEDS / "cpu" / path.name)
    assert full_run.objective.kind == cpu_run.objective.kind == "causal_lm"
    assert full_run.optimizer.betas == cpu_run.optimizer.betas == [0.9, 0.95]


def test_the_seed_appendices_are_all_there():
    names = {p.stem for p in SEEDS.glob("*.yaml")}
    assert len(names) == 13 and len(list((SEEDS / "cpu").glob("*.yaml"))) == 13
