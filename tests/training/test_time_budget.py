"""A run given a time budget (training.max_time, --max-time) ends with an evaluation, a `best` and checkpoints
to average; evaluations and checkpoints can come every so many seconds; off a terminal, progress is printed
a line per log interval, as the Hugging Face Trainer prints it. Time is a fake clock here (10 s a step), so
what the tests check does not depend on how loaded the machine is."""

import ast
import json
import subprocess
import sys

import pytest

from encdec.cli import main
from encdec.errors import ConfigError
from encdec.runs.run_dir import RunDir
from encdec.schema import field_type
from encdec.training.metrics import read_metrics
from encdec.training.run_config import TrainingSection
from encdec.training.step_log import StepLog, progress_line

SECONDS_A_STEP = 10.0


@pytest.fixture
def fake_clock(monkeypatch):
    """Training time is the step times 10 s."""
    monkeypatch.setattr(StepLog, "elapsed", lambda self: self.state.step * SECONDS_A_STEP)


def train(tiny_config, run, *extra) -> int:
    return main(["train", str(tiny_config), "--out", str(run), "--set", "training.steps=1000", *extra])


def test_a_run_out_of_time_ends_with_an_evaluation_a_best_and_checkpoints_to_average(
    tmp_path, tiny_config, fake_clock, capsys
):
    run = tmp_path / "run"
    budget = ["--max-time", "35s", "--set", "evaluation.interval=1000", "--set", "output.save_interval=1"]
    assert train(tiny_config, run, *budget) == 0
    out = capsys.readouterr().out
    records = read_metrics(run / "metrics.jsonl")
    assert max(r["step"] for r in records if r["kind"] == "train") == 4  # 40 s >= 35 s: the 4th step's end
    assert [r["step"] for r in records if r["kind"] == "eval"] == [4]
    assert "stopped at step 4: training.max_time reached" in out and "at step 4 (its last evaluation)" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["out_of_time"] and summary["eval_step"] == 4 and summary["steps"] == 4
    assert RunDir(run).checkpoint("best").name == "step_00000004"
    assert main(["average", str(run), "--last", "3"]) == 0  # output.keep_last 3 of the steps saved each step


def test_a_run_out_of_time_resumes_with_a_longer_budget(tmp_path, tiny_config, fake_clock):
    """The budget counts training time over resumes, and may grow on resume as training.steps may."""
    run = tmp_path / "run"
    assert train(tiny_config, run, "--max-time", "35s", "--set", "evaluation.interval=1000") == 0
    assert train(tiny_config, run, "--max-time", "75s", "--set", "evaluation.interval=1000", "--resume") == 0
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records if r["kind"] == "eval"] == [4, 8]
    assert json.loads((run / "summary.json").read_text())["steps"] == 8


def test_evaluations_and_checkpoints_come_every_so_many_seconds(tmp_path, tiny_config, fake_clock):
    run = tmp_path / "run"
    timed = ["--set", "training.steps=9", "--set", "evaluation.interval=1000", "--set", "output.save_interval=1000"]
    timed += ["--set", "evaluation.interval_time=30", "--set", "output.save_interval_time=20"]
    assert train(tiny_config, run, *timed) == 0
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records if r["kind"] == "eval"] == [3, 6, 9]  # every 30 s, and at the last step
    saved = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert saved == ["step_00000006", "step_00000008", "step_00000009"]  # every 20 s or evaluation (keep_last 3)


duration = field_type(TrainingSection, "max_time", "--max-time")  # what --max-time reads, as the config does


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("15m", 900), ("1h30m", 5400), ("1:30:00", 5400), ("0:59:59.5", 3599.5), ("2.5", 2.5), ("90m", 5400)],
)
def test_a_time_budget_is_read_in_the_units_people_write(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "15x", "1h-5m", "1:3:0", "1:30", "9" * 12 + "s"])
def test_a_time_budget_that_is_none_is_one_sentence(text):
    with pytest.raises(ConfigError, match="--max-time must be a duration"):
        duration(text)


@pytest.mark.parametrize("text", ["1:99:99", "1:60:00", "0:00:60", "2:59:60.5"])
def test_a_clock_time_of_60_minutes_or_seconds_is_refused_not_carried(text, tmp_path, tiny_config, capsys):
    """1:99:99 is no H:MM:SS (it was read as 1 h 99 min 99 s): one sentence on the command line, in the config
    and in --set alike, before any run is made."""
    says = "must keep the minutes and seconds of H:MM:SS below 60, got " + repr(text)
    assert train(tiny_config, tmp_path / "run", "--max-time", text) == 2
    assert capsys.readouterr().err.splitlines() == [f"encdec: error: --max-time {says}"]
    for key in ("training.max_time", "evaluation.interval_time", "output.save_interval_time"):
        assert train(tiny_config, tmp_path / "run", "--set", f"{key}={text}") == 2
        assert capsys.readouterr().err.splitlines() == [f"encdec: error: {key} {says}"]
    assert not (tmp_path / "run").exists()


def test_a_duration_in_the_config_file_is_read_as_on_the_command_line(tmp_path, tiny_config):
    from encdec.training import load_config

    config = tmp_path / "budget.yaml"
    config.write_text(tiny_config.read_text().replace("training:", "training:\n  max_time: 1:30:00", 1))
    assert load_config(config).training.max_time == 5400
    config.write_text(tiny_config.read_text().replace("training:", "training:\n  max_time: 1:99:99", 1))
    with pytest.raises(ConfigError, match="training.max_time must keep the minutes and seconds of H:MM:SS below 60"):
        load_config(config)


def test_a_budget_under_a_second_or_of_years_is_refused(tmp_path, tiny_config, capsys):
    assert train(tiny_config, tmp_path / "run", "--max-time", "0.5") == 2
    assert "--max-time must be from 1 to 100,000,000 seconds, got 0.5" in capsys.readouterr().err
    assert train(tiny_config, tmp_path / "run", "--max-time", "9" * 40) == 2
    assert "--max-time must be from 1 to 100,000,000 seconds, got 1e+40" in capsys.readouterr().err
    assert train(tiny_config, tmp_path / "run", "--set", "training.max_time=0.5") == 2
    assert "training.max_time must be from 1 to 100,000,000 seconds" in capsys.readouterr().err


def test_training_into_a_file_prints_a_progress_line_each_log_interval(tmp_path, tiny_config):
    """stderr no terminal (2> log): tqdm's bar is off, and a line per log interval says how the run goes, in the
    bar's place, as the Hugging Face Trainer prints its logs."""
    command = [sys.executable, "-m", "encdec", "train", str(tiny_config), "--out", str(tmp_path / "run")]
    command += ["--set", "training.steps=6", "--set", "output.log_interval=2"]
    with open(tmp_path / "log", "w") as log:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=log, timeout=600)  # a hang bound
    assert done.returncode == 0, (tmp_path / "log").read_text()[-2000:]
    lines = [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("{'step'")]
    progress = [ast.literal_eval(line) for line in lines]
    assert [p["step"] for p in progress] == [1, 2, 4, 6]
    assert set(progress[0]) == {
        "step",
        "loss",
        "learning_rate",
        "seconds_per_step",
        "target_tokens_per_second",
        "source_tokens_per_second",
        "time_left",
    }
    assert progress[-1]["time_left"] == "0:00:00" and all(p["loss"] > 0 for p in progress)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r["kind"] == "train"]
    assert all(r["source_tokens_per_s"] > 0 and r["tokens_per_s"] > 0 for r in trained)


def test_time_left_is_the_earlier_of_the_steps_left_and_what_max_time_leaves():
    """On the last step of a run capped at 600 s the line says so, not the steps' pace (issue 58: '2:10:04' was
    printed there); without a cap, the steps decide; a run without sources prints no source rate."""
    record = {"step": 97, "loss": 2.0, "lr": 1e-3, "tokens_per_s": 150.0, "source_tokens_per_s": 2400.0}
    capped = ast.literal_eval(progress_line({**record, "elapsed": 598.0}, 30.0, 360, max_time=600))
    assert capped["time_left"] == "0:00:02" and capped["source_tokens_per_second"] == 2400
    early = ast.literal_eval(progress_line({**record, "elapsed": 10.0}, 1.0, 120, max_time=600))
    assert early["time_left"] == "0:00:23"  # 23 steps left at 1 s, well inside the cap
    assert ast.literal_eval(progress_line({**record, "elapsed": 598.0}, 30.0, 360))["time_left"] == "2:11:30"
    assert (
        ast.literal_eval(progress_line({**record, "elapsed": 700.0}, 30.0, 360, max_time=600))["time_left"] == "0:00:00"
    )
    no_source = {k: v for k, v in record.items() if k != "source_tokens_per_s"} | {"elapsed": 1.0}
    assert "source_tokens_per_second" not in ast.literal_eval(progress_line(no_source, 1.0, 120))
