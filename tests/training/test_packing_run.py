"""objective.pack trains end to end: DialogSum summarization and UL2 pretraining, with each step's fill logged."""

import pytest
import yaml
from run_kit import sets

from encdec.cli import main
from encdec.training.metrics import read_metrics

DIALOGSUM = "summarization/dialogsum/"


@pytest.fixture
def dialogsum_config(tmp_path, shared_data, device):
    """A tiny T5 summarising DialogSum dialogues (bytes), as the fine-tuning recipe lays them out."""
    config = {
        "model": {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0},
        "tokenizer": {"kind": "byte"},
        "data": {
            "format": "jsonl-pairs",
            "train": [str(shared_data / DIALOGSUM / "dialogsum.train.jsonl.gz")],
            "validation": [str(shared_data / DIALOGSUM / "dialogsum.dev.jsonl.gz")],
            "max_documents": 400,
        },
        "objective": {
            "kind": "seq2seq",
            "source_template": "{source}\nSummary:",
            "max_source_len": 2048,
            "max_target_len": 512,
        },
        "training": {"steps": 3, "batch_size": 16, "seed": 3, "threads": 1, "device": device.type},
        "evaluation": {"interval": 3, "steps": 1},
        "output": {"plot": False, "log_interval": 1},
    }
    path = tmp_path / "dialogsum.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def train_records(run_dir) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]


def test_packed_dialogsum_training_runs_and_logs_rows_at_least_as_full(dialogsum_config, tmp_path):
    """The unpacked run buckets its batches by length, which fills its rows well already (about 0.88 here);
    packing fills them as well or better with examples of mixed lengths (tests/data/test_packing.py
    compares the same examples)."""
    for pack in ("false", "true"):
        assert (
            main(["train", str(dialogsum_config), "--out", str(tmp_path / pack), "--set", f"objective.pack={pack}"])
            == 0
        )
    plain, packed = train_records(tmp_path / "false"), train_records(tmp_path / "true")
    assert len(packed) == 3 and all(0 < r["loss"] < 10 for r in packed)
    evaluation = [r for r in read_metrics(tmp_path / "true" / "metrics.jsonl") if r["kind"] == "eval"]
    assert 0 < evaluation[-1]["val_loss"] < 10
    mean_fill = [sum(r["fill"] for r in records) / len(records) for records in (plain, packed)]
    assert mean_fill[1] > 0.85 and mean_fill[1] > mean_fill[0] - 0.02


def test_packed_ul2_pretraining_trains_as_the_unpacked_run_does(tiny_config, tmp_path):
    """UL2 draws the same examples either way, and the loss is the mean over real target tokens in both:
    without dropout, the packed run's losses are the unpacked run's, in fuller rows."""
    records = {}
    for pack in ("false", "true"):
        run = tmp_path / f"ul2_{pack}"
        settings = sets(f"objective.pack={pack}", "objective.seq_len=512", "model.dropout=0.0", "training.steps=3")
        settings += sets("evaluation.interval=3", "output.log_interval=1")
        assert main(["train", str(tiny_config), "--out", str(run), *settings]) == 0
        records[pack] = train_records(run)
    plain, packed = records["false"], records["true"]
    assert [r["tokens"] for r in packed] == [r["tokens"] for r in plain]
    for a, b in zip(plain, packed, strict=True):
        assert abs(a["loss"] - b["loss"]) < 1e-4 and b["fill"] > a["fill"]


def test_a_packed_run_resumes_to_the_same_losses(tiny_config, tmp_path):
    common = sets("objective.pack=true", "objective.seq_len=512", "evaluation.interval=2", "output.log_interval=1")
    common += sets("schedule.kind=constant", "schedule.warmup_steps=0")  # the lr does not depend on training.steps
    assert (
        main(["train", str(tiny_config), "--out", str(tmp_path / "whole"), "--set", "training.steps=4", *common]) == 0
    )
    split = tmp_path / "split"
    assert main(["train", str(tiny_config), "--out", str(split), "--set", "training.steps=2", *common]) == 0
    assert main(["train", str(tiny_config), "--out", str(split), "--resume", "--set", "training.steps=4", *common]) == 0
    whole = [(r["step"], r["loss"]) for r in train_records(tmp_path / "whole")]
    assert [(r["step"], r["loss"]) for r in train_records(split)] == whole
