"""Evaluation that generates: a validation sample scored at each evaluation, the best checkpoint by that
metric, early stopping on patience."""

from pathlib import Path

import pytest

from encdec.cli import main
from encdec.runs.load import load_run
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import read_metrics

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "recipes"


def seq2seq_run(tmp_path, shared_data, *overrides) -> list[str]:
    m30k = shared_data / "translation" / "multi30k"
    data = [
        f"data.train=[{m30k / 'train.en.gz'}, {m30k / 'train.de.gz'}]",
        f"data.validation=[{m30k / 'val.en.gz'}, {m30k / 'val.de.gz'}]",
    ]
    settings = [
        "tokenizer.kind=byte",
        "model.preset=transformer-tiny",
        "training.steps=6",
        "training.batch_size=8",
        "evaluation.interval=2",
        "evaluation.steps=1",
        "data.max_documents=200",
        "training.device=cpu",
        "evaluation.generate=6",
        "evaluation.max_new_tokens=8",
        "output.plot=false",
        *data,
        *overrides,
    ]
    return [
        "train",
        f"{RECIPES}/multi30k_en_de.yaml",
        "--out",
        str(tmp_path / "run"),
        *(a for s in settings for a in ("--set", s)),
    ]


def evals(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "eval"]


def test_each_evaluation_scores_generated_validation_examples_beside_the_loss(tmp_path, shared_data):
    assert main(seq2seq_run(tmp_path, shared_data, "evaluation.metric=bleu")) == 0
    records = evals(tmp_path / "run")
    assert [r["step"] for r in records] == [2, 4, 6]
    for record in records:
        assert {"val_loss", "val_bleu", "val_chrf", "val_rougeL"} <= set(record)
        assert 0 <= record["val_chrf"] <= 100


def test_the_best_checkpoint_is_chosen_by_the_metric_when_asked(tmp_path, shared_data):
    assert (
        main(
            seq2seq_run(tmp_path, shared_data, "output.best_by=metric", "evaluation.metric=chrf", "output.keep_last=5")
        )
        == 0
    )
    records = evals(tmp_path / "run")
    best = max(records, key=lambda r: (r["val_chrf"], r["step"]))  # the last of the highest: trained longest
    assert RunDir(tmp_path / "run").pointer("best") == f"step_{best['step']:08d}"


def test_the_best_checkpoint_by_an_error_rate_is_the_lowest(tmp_path, shared_data):
    args = seq2seq_run(tmp_path, shared_data, "output.best_by=metric", "evaluation.metric=cer", "output.keep_last=5")
    assert main(args) == 0
    records = evals(tmp_path / "run")
    assert all(0 <= r["val_wer"] and 0 <= r["val_cer"] for r in records)
    best = min(records, key=lambda r: (r["val_cer"], -r["step"]))  # the last of the lowest: trained longest
    assert RunDir(tmp_path / "run").pointer("best") == f"step_{best['step']:08d}"


def test_early_stopping_ends_the_run_after_patience_evaluations_without_a_better_metric(tmp_path, shared_data, capsys):
    """lr 0 keeps every evaluation equal, so none after the first is better: patience 2 stops at step 6 of 20."""
    args = seq2seq_run(
        tmp_path,
        shared_data,
        "optimizer.lr=1e-12",
        "training.steps=20",
        "training.early_stopping_patience=2",
        "schedule.kind=constant",
    )
    assert main(args) == 0
    assert "stopped early at step 6" in capsys.readouterr().out
    assert [r["step"] for r in evals(tmp_path / "run")] == [2, 4, 6]
    assert load_run(tmp_path / "run", "latest").checkpoint.name == "step_00000006"


def test_best_by_metric_without_generation_is_one_sentence(tmp_path, shared_data, capsys):
    assert main(seq2seq_run(tmp_path, shared_data, "output.best_by=metric", "evaluation.generate=0")) == 2
    assert "output.best_by is metric but evaluation.generate is 0" in capsys.readouterr().err


@pytest.mark.parametrize("metric", ["rougeL", "bleu"])
def test_a_language_model_run_scores_continuations(tmp_path, tiny_config, metric):
    overrides = [
        "training.steps=2",
        "evaluation.interval=2",
        "evaluation.generate=3",
        f"evaluation.metric={metric}",
        "evaluation.max_new_tokens=4",
    ]
    assert (
        main(["train", str(tiny_config), "--out", str(tmp_path / "run"), *(a for o in overrides for a in ("--set", o))])
        == 0
    )
    assert f"val_{metric}" in evals(tmp_path / "run")[0]
