"""`encdec train --nproc-per-node N` refuses what it can know before it starts any process, in one line and
with no launch (issue 56): a bad N, more processes than the machine holds, a run directory rank 0 would
refuse, a missing data file. A launch it makes says nothing of its own processes' C++ notes."""

import os

import pytest
import yaml
from bad_inputs_kit import TINY as BASE
from bad_inputs_kit import tiny

from encdec.cli import main
from encdec.cli import train as train_command
from encdec.sizing import available_cores
from encdec.training import launch

TORCHRUN_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def config(tmp_path, monkeypatch):
    for variable in TORCHRUN_VARIABLES:
        monkeypatch.delenv(variable, raising=False)

    def launched(*args, **kwargs):
        raise AssertionError("a refusal known before the launch started processes")

    monkeypatch.setattr(train_command, "launch_workers", launched)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny(training={**BASE["training"], "distributed": "ddp"})))
    return path


def refused(argv: list[str], capsys) -> str:
    code = main(argv)
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("encdec: error: "), lines
    return lines[0]


NPROC = {  # --nproc-per-node -> the sentence's telling part
    "0": "--nproc-per-node must be a positive integer, got 0",
    "-2": "--nproc-per-node must be a positive integer, got -2",
    "two": "--nproc-per-node must be an integer, got 'two'",
    "1025": "--nproc-per-node must be at most 1,024, got 1,025",
    "more than cores": "asks for more CPU processes than this machine's",
}


@pytest.mark.parametrize("value", NPROC)
def test_a_bad_process_count_is_one_line_and_starts_nothing(value, config, tmp_path, capsys):
    nproc = str(available_cores() + 1) if value == "more than cores" else value
    line = refused(["train", str(config), "--out", str(tmp_path / "run"), "--nproc-per-node", nproc], capsys)
    assert NPROC[value] in line
    assert not (tmp_path / "run").exists()


def two_processes():
    if available_cores() < 2:
        pytest.skip("this machine has one core: two processes are refused")
    return ["--nproc-per-node", "2"]


def test_a_run_directory_rank_0_would_refuse_is_refused_before_the_launch(config, tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    line = refused(["train", str(config), "--out", str(tmp_path / "notes"), *two_processes()], capsys)
    assert "holds 'todo.txt' but is not a run directory of encdec train" in line
    (tmp_path / "file").write_text("a file")
    line = refused(["train", str(config), "--out", str(tmp_path / "file"), *two_processes()], capsys)
    assert "file is a file" in line
    assert sorted(os.listdir(tmp_path / "notes")) == ["todo.txt"]


def test_a_missing_data_file_is_refused_before_the_launch(config, tmp_path, capsys):
    argv = ["train", str(config), "--out", str(tmp_path / "run"), "--set", "data.train=[/nonexistent/stories.txt]"]
    line = refused([*argv, *two_processes()], capsys)
    assert line == "encdec: error: data file /nonexistent/stories.txt does not exist"
    assert not (tmp_path / "run").exists()


def test_the_launched_processes_keep_their_c_plus_plus_warnings_to_themselves(monkeypatch):
    """Without -v the processes' C++ warnings (c10d's notes on sockets, which pass by Python's stderr and so by
    what encdec holds) are off; with -v, or a level the user set, they are as asked."""
    import torch.distributed.launcher.api as api

    seen = []
    monkeypatch.setattr(api, "elastic_launch", lambda config, entry: lambda *args: seen.append(dict(os.environ)))
    monkeypatch.delenv("TORCH_CPP_LOG_LEVEL", raising=False)
    assert launch.launch_workers(["train"], 2) == 0
    assert seen[-1]["TORCH_CPP_LOG_LEVEL"] == "ERROR" and "TORCH_CPP_LOG_LEVEL" not in os.environ
    assert launch.launch_workers(["train"], 2, verbose=True) == 0
    assert "TORCH_CPP_LOG_LEVEL" not in seen[-1]
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "INFO")
    assert launch.launch_workers(["train"], 2) == 0
    assert seen[-1]["TORCH_CPP_LOG_LEVEL"] == "INFO"


def test_under_torchrun_the_first_process_to_fail_prints_whichever_rank_it_is(tmp_path):
    """torchrun stops the other processes once one fails, so rank 0 may never print: the first to fail claims
    the mark beside the processes' error files and prints (and keeps printing); every later one stays silent.
    Without an error file, rank 0 alone prints; under encdec's launcher none does (it prints for them)."""
    attempt = tmp_path / "run_id" / "attempt_0"

    def process(rank: int, **extra: str) -> dict:
        (attempt / str(rank)).mkdir(parents=True, exist_ok=True)
        env = {"TORCHELASTIC_RUN_ID": "run_id", "RANK": str(rank), "WORLD_SIZE": "3"}
        return {**env, "TORCHELASTIC_ERROR_FILE": str(attempt / str(rank) / "error.json"), **extra}

    assert launch.prints_failure(process(2))  # rank 2 failed first
    assert not launch.prints_failure(process(0)) and not launch.prints_failure(process(1))
    assert launch.prints_failure(process(2))  # its next line too
    assert (attempt / launch.FIRST_MARK).is_file()
    no_error_file = {"TORCHELASTIC_RUN_ID": "other", "WORLD_SIZE": "2"}
    assert launch.prints_failure({**no_error_file, "RANK": "0"})
    assert not launch.prints_failure({**no_error_file, "RANK": "1"})
    assert not launch.prints_failure(process(3, ENCDEC_LAUNCHER="2"))
