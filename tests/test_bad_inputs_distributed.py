"""Several processes misused: one sentence, from one process, and nothing written.

A torchrun environment set by hand and checked before any process group starts; a bad
config under torchrun (rank 0 alone speaks, torchrun's report holds the sentence as its
root cause); `encdec train --nproc-per-node N`, which launches the processes itself and
turns any failure into one `encdec: error:` line and a non-zero exit, on CPU with gloo.
"""

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from bad_inputs_kit import TINY as BASE
from bad_inputs_kit import progress, tiny

import encdec
from encdec.cli import main
from encdec.sizing import available_cores
from encdec.training.launch import WorkerError, _report

pytestmark = pytest.mark.serial  # process groups stopped on a schedule: alone, not beside other tests

PACKAGE = Path(encdec.__file__).parent  # its frames in a traceback name this folder, wherever it is cloned
TINY = tiny(training={**BASE["training"], "distributed": "ddp"})
TORCHRUN_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
HOST = {"MASTER_ADDR": "localhost", "MASTER_PORT": "29511"}


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("distributed") / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def one_sentence(code: int, err: str) -> str:
    """The one `encdec: error:` line of a failure, checked: non-zero exit, one short line, no traceback."""
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert code != 0, err
    assert len(lines) == 1 and lines[0].startswith("encdec: error: "), err
    assert len(lines[0]) < 300 and "Traceback" not in err, err
    return lines[0]


ENVIRONMENTS = {  # the variables, the arguments after `train CONFIG --out RUN`, a piece of the sentence
    "WORLD_SIZE alone": ({"WORLD_SIZE": "2"}, [], "WORLD_SIZE is 2 but RANK is not set"),
    "WORLD_SIZE not a number": ({"WORLD_SIZE": "two", "RANK": "0"}, [], "WORLD_SIZE must be an integer, got 'two'"),
    "WORLD_SIZE 0": ({"WORLD_SIZE": "0"}, [], "WORLD_SIZE must be at least 1, got 0"),
    "RANK beyond": ({"WORLD_SIZE": "2", "RANK": "2", **HOST}, [], "RANK must be from 0 to 1 (below WORLD_SIZE), got 2"),
    "RANK negative": ({"WORLD_SIZE": "2", "RANK": "-1", **HOST}, [], "RANK must be from 0 to 1"),
    "LOCAL_RANK beyond": (
        {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "2", **HOST},
        [],
        "LOCAL_RANK must be from 0 to 1 (below LOCAL_WORLD_SIZE)",
    ),
    "LOCAL_WORLD_SIZE above WORLD_SIZE": (
        {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "4", **HOST},
        [],
        "LOCAL_WORLD_SIZE must be from 1 to 2",
    ),
    "no MASTER_ADDR": ({"WORLD_SIZE": "2", "RANK": "1"}, [], "MASTER_ADDR is not"),
    "no MASTER_PORT": ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "localhost"}, [], "MASTER_PORT is not"),
    "MASTER_PORT beyond": (
        {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": "70000"},
        [],
        "MASTER_PORT must be from 1 to 65535",
    ),
    "a batch that does not split": (
        {"WORLD_SIZE": "2", "RANK": "0", **HOST},
        ["--set", "training.batch_size=5"],
        "training.batch_size (5) must be divisible by the 2 processes",
    ),
    "--nproc-per-node under torchrun": (
        {"WORLD_SIZE": "2", "RANK": "0", **HOST},
        ["--nproc-per-node", "2"],
        "--nproc-per-node starts the processes itself",
    ),
}


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_a_misused_torchrun_environment_is_one_sentence_before_any_process_group(
    name, config, tmp_path, monkeypatch, capsys
):
    """Variables set by hand (or a config no process could run) are refused before the processes would meet:
    no traceback from inside init_process_group, no wait for a peer that never comes, no run directory."""
    environment, extra, says = ENVIRONMENTS[name]
    for variable in TORCHRUN_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    code = main(["train", str(config), "--out", str(tmp_path / "run"), *extra])
    line = one_sentence(code, capsys.readouterr().err)
    assert says in line, line
    assert not (tmp_path / "run").exists()


def encdec(*args: str, launcher: list[str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`encdec ARGS` in a fresh process (under `launcher`, such as torchrun, if given), outside any torchrun."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES and not k.startswith("TORCHELASTIC")}
    command = [sys.executable, *(launcher or []), "-m", "encdec", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def test_torchrun_with_a_bad_config_prints_the_sentence_once_and_reports_it_as_the_root_cause(config, tmp_path):
    """Every process fails alike; rank 0 alone prints, and torchrun's own report (which encdec cannot stop
    it printing) shows each process's sentence, read from the error file torch elastic gave it."""
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node", "2"]
    done = encdec("train", str(config), "--out", str(tmp_path / "run"), "--set", "training.stpes=3", launcher=torchrun)
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("encdec: error: ")]
    assert ours == ["encdec: error: unknown key training.stpes; did you mean steps?"], done.stderr
    assert "traceback : unknown key training.stpes" in done.stderr  # torchrun's report names the cause
    assert str(PACKAGE) not in done.stderr  # no traceback through encdec's code
    assert not (tmp_path / "run").exists()


LAUNCHES = {
    "a bad config": (["--set", "training.stpes=3"], 2, "unknown key training.stpes"),
    "a batch that does not split": (["--set", "training.batch_size=5"], 2, "must be divisible by the 2 processes"),
    "more processes than cores": ([], 2, "asks for more CPU processes than this machine's"),
    "a missing data file (refused before the launch)": (
        ["--set", "data.train=[/nonexistent/stories.txt]"],
        2,
        "data file /nonexistent/stories.txt does not exist",
    ),
    "a data file not of its format (each process fails after the group starts)": (
        ["--set", "data.format=jsonl", "--set", f"data.train=[{Path(__file__).resolve()}]"],
        2,
        "line 1 is not valid JSON",
    ),
}


@pytest.mark.parametrize("name", LAUNCHES)
def test_the_launcher_turns_a_failure_into_one_sentence_and_its_exit_code(name, config, tmp_path):
    extra, code, says = LAUNCHES[name]
    nproc = available_cores() + 1 if name == "more processes than cores" else 2
    if nproc == 2 and available_cores() < 2:
        pytest.skip("this machine has one core: two processes are refused")
    done = encdec("train", str(config), "--out", str(tmp_path / "run"), "--nproc-per-node", str(nproc), *extra)
    line = one_sentence(done.returncode, done.stderr)
    assert done.returncode == code and says in line, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["run"])  # nothing but the run directory itself
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_launcher_trains_in_two_processes_and_says_nothing_else(config, tmp_path):
    if available_cores() < 2:
        pytest.skip("this machine has one core: two processes are refused")
    done = encdec("train", str(config), "--out", str(tmp_path / "run"), "--nproc-per-node", "2", timeout=300)
    assert done.returncode == 0, done.stderr
    # no banner, no notes of the agent starting or stopping processes: only rank 0's progress lines (stderr is no
    # terminal here), one per log interval
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert all(progress(line) for line in lines), done.stderr
    assert [ast.literal_eval(line)["step"] for line in lines] == [1, 2], done.stderr
    assert "2 steps in" in done.stdout and done.stdout.count("validation loss") == 1  # rank 0 alone reports
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == "step_00000002"


def test_what_a_library_logs_in_each_process_before_its_refusal_is_not_printed(config, tmp_path):
    """Each process reads a corrupt parquet file: `datasets` logs its error there before encdec refuses, and the
    processes' stderr is the terminal's; the launcher's one sentence still comes alone."""
    pytest.importorskip("datasets")
    if available_cores() < 2:
        pytest.skip("this machine has one core: two processes are refused")
    (tmp_path / "stories.parquet").write_text("PAR1 not parquet at all")
    data = ["data.format=datasets", "data.dataset=parquet", f"data.train=[{tmp_path / 'stories.parquet'}]"]
    settings = [word for setting in data for word in ("--set", setting)]
    done = encdec("train", str(config), "--out", str(tmp_path / "run"), "--nproc-per-node", "2", *settings)
    assert "cannot be loaded (ArrowInvalid" in one_sentence(done.returncode, done.stderr)


def failure(exitcode: int, timestamp: int = 0, message: object = "", signal_name: str = "<N/A>"):
    """A stand-in for torch elastic's ProcessFailure: what `_report` reads of one."""
    return SimpleNamespace(exitcode=exitcode, timestamp=timestamp, message=message, signal_name=lambda: signal_name)


REPORTS = {
    "the first sentence a process wrote": (
        {
            0: failure(-signal.SIGTERM, 5, signal_name="SIGTERM"),
            1: failure(2, 3, {"message": "it said why", "encdec": True, "code": 2}),
        },
        (2, "it said why"),
    ),
    "a process the system killed": (
        {0: failure(-signal.SIGTERM, 5, signal_name="SIGTERM"), 1: failure(-signal.SIGKILL, 6, signal_name="SIGKILL")},
        (137, "training process 1 was killed by SIGKILL"),
    ),
    "a process that crashed without a word": (
        {0: failure(1, 4, "To enable traceback see: ...")},
        (1, "training process 0 failed with exit code 1; its output above says why"),
    ),
    "processes stopped by a signal after saving": ({0: failure(130), 1: failure(130)}, (130, None)),
}


@pytest.mark.parametrize("name", REPORTS)
def test_a_failed_process_becomes_one_sentence_and_an_exit_code(name):
    failures, (code, says) = REPORTS[name]
    if says is None:
        assert _report(failures) == code
        return
    with pytest.raises(WorkerError) as raised:
        _report(failures)
    assert raised.value.exit_code == code and str(raised.value).startswith(says)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc: the launcher's workers)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children = open(f"/proc/{pid}/task/{task}/children").read().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *descendants(child)]
    return found


def test_a_signal_that_reaches_one_process_stops_them_all_at_the_same_step(tmp_path):
    """SIGTERM to rank 1 alone: every process stops at the same step, one checkpoint is saved, no traceback
    (a process leaving alone would leave the other waiting in a collective)."""
    if available_cores() < 2:
        pytest.skip("this machine has one core: two processes are refused")
    config = tmp_path / "tiny.yaml"
    training = {**BASE["training"], "steps": 5000, "distributed": "ddp"}
    evaluation, output = {"interval": 5000, "steps": 1}, {"save_interval": 5000, "plot": False, "log_interval": 5}
    config.write_text(yaml.safe_dump(tiny(training=training, evaluation=evaluation, output=output)))
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    command = [sys.executable, "-m", "encdec", "train", str(config), "--out", str(run), "--nproc-per-node", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    rank1 = None
    deadline = time.monotonic() + 300  # a hang detector: two workers start and log a step in about 20 s here
    while rank1 is None and time.monotonic() < deadline:  # once training has logged a step
        time.sleep(0.2)
        if not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").stat().st_size:
            continue
        for pid in descendants(process.pid):  # parents before children: the first is the worker itself, not a
            try:  # process it started (a data loader's worker inherits RANK=1 too)
                if b"RANK=1" in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                    rank1 = pid
                    break
            except OSError:
                continue
    try:
        assert rank1 is not None, "the workers did not start"
        os.kill(rank1, signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:  # a hang must not leave processes training on after the test
        for pid in [*descendants(process.pid), process.pid] if process.poll() is None else []:
            os.kill(pid, signal.SIGKILL)
    assert process.returncode == 143 and "Traceback" not in err, err
    assert "resume with:" in out
    steps = [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_")]
    assert len(steps) == 1 and int(steps[0][5:]) % 5 == 0 and int(steps[0][5:]) < 5000
