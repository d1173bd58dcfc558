"""Resume continues the same run: a changed config is refused with its keys listed, unless accepted and recorded."""

import re

import pytest

from encdec.cli import main
from encdec.runs.load import load_run
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import read_metrics
from encdec.training.run_config import saved_config

FAST = ["--set", "training.steps=2", "--set", "output.save_interval=2", "--set", "evaluation.interval=2"]


def train(tiny_config, run, *extra) -> int:
    return main(["train", str(tiny_config), "--out", str(run), *FAST, *extra])


def snapshot(run):
    return {path.relative_to(run): path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}


@pytest.mark.parametrize(
    "change,listed",
    [
        (["--set", "optimizer.lr=1e-3"], "optimizer.lr 0.002 -> 0.001"),
        (["--set", "training.batch_size=8"], "training.batch_size 4 -> 8"),
        (["--set", "model.d_ff=96"], "model.d_ff 64 -> 96"),
        (["--set", "tokenizer.num_sentinels=20"], "tokenizer.num_sentinels 50 -> 20"),
        (["--set", "data.max_documents=100"], "data.max_documents 120 -> 100"),
    ],
)
def test_resuming_with_a_changed_config_is_refused_naming_the_keys_and_changes_nothing(
    tmp_path, tiny_config, capsys, change, listed
):
    run = tmp_path / "run"
    assert train(tiny_config, run) == 0
    before = snapshot(run)
    capsys.readouterr()
    assert train(tiny_config, run, "--resume", "--set", "training.steps=4", *change) == 2
    err = capsys.readouterr().err
    assert listed in err and "--accept-changes" in err and err.count("\n") == 1
    assert snapshot(run) == before


def test_safe_keys_may_change_on_resume(tmp_path, tiny_config):
    run = tmp_path / "run"
    assert train(tiny_config, run) == 0
    safe = ["--set", "training.steps=3", "--set", "evaluation.interval=3", "--set", "output.log_interval=1"]
    assert main(["train", str(tiny_config), "--out", str(run), "--resume", *safe]) == 0
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3]
    changes = [r["changes"] for r in records if r["kind"] == "config_change"]  # recorded, though safe
    assert changes == [{"evaluation.interval": [2, 3], "output.log_interval": [10, 1], "training.steps": [2, 3]}]


def test_a_model_key_set_to_the_value_it_had_is_no_change(tmp_path, tiny_config):
    """The model is compared as the ModelConfig it builds: naming a default (rope_theta, rope_cross)
    or the value the section already gave is the same model, so the run resumes."""
    run = tmp_path / "run"
    assert train(tiny_config, run) == 0
    same = ["--set", "model.rope_theta=10000.0", "--set", "model.rope_cross=relative", "--set", "model.d_ff=64"]
    assert train(tiny_config, run, "--resume", "--set", "training.steps=3", *same) == 0
    records = read_metrics(run / "metrics.jsonl")
    assert [r["changes"] for r in records if r["kind"] == "config_change"] == [{"training.steps": [2, 3]}]


def test_accepted_changes_continue_the_run_and_are_recorded(tmp_path, tiny_config):
    run = tmp_path / "run"
    assert train(tiny_config, run) == 0
    assert (
        train(
            tiny_config, run, "--resume", "--accept-changes", "--set", "training.steps=3", "--set", "optimizer.lr=1e-3"
        )
        == 0
    )
    records = read_metrics(run / "metrics.jsonl")
    change = next(r for r in records if r["kind"] == "config_change")
    assert change["step"] == 2 and change["changes"]["optimizer.lr"] == [0.002, 0.001]
    assert saved_config(RunDir(run).checkpoint("latest")).optimizer.lr == 0.001  # the checkpoint's training config
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3]


def test_accept_changes_without_resume_is_one_sentence(tmp_path, tiny_config, capsys):
    assert train(tiny_config, tmp_path / "run", "--accept-changes") == 2
    assert capsys.readouterr().err == "encdec: error: --accept-changes goes with --resume\n"


def test_a_fine_tuned_run_resumes_with_its_inherited_model(tmp_path, tiny_config):
    """The fine-tuning config names only dropout; resuming rebuilds the pretrained architecture it saved."""
    assert train(tiny_config, tmp_path / "pretrained", "--set", "model.d_ff=96") == 0
    tuned = tmp_path / "tuned"
    inherit = ["--set", f"training.init_from={tmp_path / 'pretrained'}", "--set", "model={dropout: 0.0}"]
    assert train(tiny_config, tuned, *inherit) == 0
    assert train(tiny_config, tuned, *inherit, "--resume", "--set", "training.steps=3") == 0
    assert load_run(tuned, "latest").model.config.d_ff == 96
    assert [r["step"] for r in read_metrics(tuned / "metrics.jsonl") if r["kind"] == "train"] == [1, 2, 3]


def test_a_resume_that_changes_many_keys_is_refused_whole_with_the_rest_counted(tmp_path, tiny_config, capsys):
    """A refusal listing changes names as many whole as fit and counts the others: its advice (--accept-changes)
    is never cut away from the one line (issue 56)."""
    run = tmp_path / "run"
    assert train(tiny_config, run) == 0
    capsys.readouterr()
    changes = ["optimizer.lr=1e-3", "training.batch_size=8", "model.d_ff=96", "tokenizer.num_sentinels=20"]
    changes += ["data.max_documents=100", "optimizer.weight_decay=0.3", "training.seed=7", "model.n_heads=8"]
    assert train(tiny_config, run, "--resume", *[word for key in changes for word in ("--set", key)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) <= 300 and " ... " not in err, err
    assert re.search(r"; and \d+ more\); resume with the same config, or pass --accept-changes", err), err
