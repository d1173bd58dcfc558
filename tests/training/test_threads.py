"""A run's torch threads: the cores other processes leave free when it starts, unless training.threads says,
and the same again when it resumes, so that a resumed run repeats bitwise whatever the load then."""

import json

import torch
import yaml

from encdec import sizing
from encdec.cli import main


def test_a_run_keeps_the_threads_it_chose_when_it_resumes(monkeypatch, tmp_path, tiny_config):
    """A run that chose 1 thread on a busy machine resumes with 1 on a quiet one, so it repeats bitwise."""
    tiny = yaml.safe_load(tiny_config.read_text())
    del tiny["training"]["threads"]
    tiny_config.write_text(yaml.safe_dump(tiny))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(sizing, "available_cores", lambda: 2)
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 2)
    before = torch.get_num_threads()
    run = ["train", str(tiny_config), "--out", str(tmp_path / "run"), "--set", "evaluation.interval=2"]
    try:
        monkeypatch.setattr(sizing, "busy_cores", lambda: 1.0)  # one of 2 cores busy: 1 thread
        assert main([*run, "--set", "training.steps=2"]) == 0
        state = tmp_path / "run" / "checkpoints" / "step_00000002" / "state.json"
        assert json.loads(state.read_text())["train"]["threads"] == 1
        monkeypatch.setattr(sizing, "busy_cores", lambda: 0.0)  # quiet now: 2 would be chosen afresh
        assert main([*run, "--set", "training.steps=4", "--resume"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_every_command_that_computes_takes_threads_and_the_others_do_not():
    from encdec.cli import SUBCOMMANDS, build_parser
    from encdec.cli.threads import COMPUTING

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name in SUBCOMMANDS:
        flags = {flag for action in commands[name]._actions for flag in action.option_strings}
        assert ("--threads" in flags) == (name in COMPUTING), name


def test_a_command_computes_with_the_threads_given_or_the_free_cores(monkeypatch, tmp_path, tiny_config, capsys):
    """`encdec generate RUN --threads 1`, and without it the cores other processes leave free."""
    monkeypatch.setattr(sizing, "available_cores", lambda: 2)
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(sizing, "busy_cores", lambda: 0.0)
    before = torch.get_num_threads()
    run = tmp_path / "run"
    try:
        assert main(["train", str(tiny_config), "--out", str(run), "--set", "training.steps=2", "--threads", "2"]) == 0
        saved = json.loads((run / "checkpoints" / "step_00000002" / "state.json").read_text())
        assert saved["train"]["threads"] == 2 and "threads: 2" in (run / "config.yaml").read_text()
        assert "tokens/s, 2 CPU threads)" in capsys.readouterr().out  # the summary line says how many
        (tmp_path / "in.txt").write_text("Once upon a time\n")
        generate = ["generate", str(run), "--input", str(tmp_path / "in.txt"), "--max-new-tokens", "2"]
        assert main([*generate, "--threads", "1"]) == 0 and torch.get_num_threads() == 1
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert main(generate) == 0 and torch.get_num_threads() == 2  # both cores free
        monkeypatch.setattr(sizing, "busy_cores", lambda: 1.0)
        assert main(generate) == 0 and torch.get_num_threads() == 1  # one of them busy
    finally:
        torch.set_num_threads(before)
