"""The seeds' CPU-scale runs train through the trainer, with their extra losses logged separately."""

from pathlib import Path

import pytest

from encdec.cli import main
from encdec.training.metrics import read_metrics

SEEDS = Path(__file__).resolve().parents[2] / "configs" / "seeds" / "cpu"


@pytest.mark.parametrize(
    "config,extra_loss",
    [
        ("000_mse_embedding_loss_pos_sub.yaml", "embedding_loss"),
        ("001_mse_encoder_loss.yaml", "encoder_loss"),
        ("000_baseline.yaml", None),
    ],
)
def test_seed_cpu_config_trains_and_logs_its_extra_loss(tmp_path, shared_data, config, extra_loss):
    stories = shared_data / "tinystories" / "tinystories_train_head.txt.gz"
    code = main(
        [
            "train",
            str(SEEDS / config),
            "--out",
            str(tmp_path / "run"),
            "--set",
            "training.steps=2",
            "--set",
            f"data.train=[{stories}]",
            "--set",
            "data.validation=[]",
            "--set",
            "data.max_documents=200",
            "--set",
            "evaluation.steps=1",
            "--set",
            "training.batch_size=4",
        ]
    )
    assert code == 0
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 2 and all(r["loss"] > 0 for r in train)
    if extra_loss:
        assert all(extra_loss in r for r in train)
    assert [r for r in records if r["kind"] == "eval"][-1]["val_loss"] > 0
