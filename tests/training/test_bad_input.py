"""Bad input: one sentence naming the problem, a non-zero exit, no traceback, nothing saved lost."""

import subprocess
import sys

import pytest

from encdec.cli import main


def run_cli(capsys, *args):
    code = main(list(args))
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize(
    "override,message",
    [
        ("training.stpes=3", "unknown key training.stpes"),
        ("training.steps=many", "training.steps must be an integer, got 'many'"),
        ("optimizer.lr=-0.1", "optimizer.lr must be positive"),
        ("model.n_heads=5", "model.n_heads (5) must divide model.d_model (32)"),
        ("model.widht=3", "unknown key model.widht"),
        ("data.train=[/nonexistent/stories.txt]", "data file /nonexistent/stories.txt does not exist"),
        ("schedule.kind=warmup", "schedule.kind must be one of constant, linear, cosine, inverse_sqrt"),
    ],
)
def test_bad_config_is_one_sentence_and_exit_2(capsys, tmp_path, tiny_config, override, message):
    code, err = run_cli(capsys, "train", str(tiny_config), "--out", str(tmp_path / "run"), "--set", override)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_config_that_is_not_yaml_names_the_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  preset: [unclosed\n")
    code, err = run_cli(capsys, "train", str(bad), "--out", str(tmp_path / "run"))
    assert code == 2 and "is not valid YAML at line" in err


def test_the_command_line_exits_without_traceback(tmp_path, tiny_config):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "encdec",
            "train",
            str(tiny_config),
            "--out",
            str(tmp_path / "run"),
            "--set",
            "optimizer.lr=0",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "encdec: error: optimizer.lr must be positive, got 0.0"


def test_numbers_written_without_a_dot_are_numbers(tiny_config):
    from encdec.training.run_config import load_config

    assert load_config(tiny_config, ["optimizer.lr=1e-4"]).optimizer.lr == 1e-4


def test_a_model_too_large_for_the_device_is_refused_before_it_is_built(capsys, tmp_path, tiny_config):
    code, err = run_cli(
        capsys,
        "train",
        str(tiny_config),
        "--out",
        str(tmp_path / "run"),
        "--set",
        "model.d_model=100000000",
        "--set",
        "model.d_head=8",
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the model has about" in err and "GiB but cpu has" in err and "GiB free" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_step_that_runs_out_of_memory_is_one_sentence_naming_the_batch(capsys, tmp_path, tiny_config, monkeypatch):
    import encdec.training.trainer as trainer

    def allocation_fails(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:119] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 81604378624 bytes"
        )

    monkeypatch.setattr(trainer, "optimizer_step", allocation_fails)
    code, err = run_cli(capsys, "train", str(tiny_config), "--out", str(tmp_path / "run"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "a training step ran out of memory on cpu with batches of 4 rows of up to 64 tokens" in err
