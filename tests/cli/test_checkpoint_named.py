"""Every command that opens a run says which checkpoint it used and why (a fallback to the latest included),
eval.json records it, and the reports of two checkpoints on one file are both kept."""

import json

import pytest
from run_kit import tiny_pairs_run

from encdec.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A seq2seq run of 4 steps saving every 2, byte tokenizer, on the CPU."""
    root = tmp_path_factory.mktemp("named")
    tiny_pairs_run(root, steps=4, save_interval=2)
    (root / "in.txt").write_text("red cat\n")
    return root


def said(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("model: ")]


def test_each_command_says_the_checkpoint_it_opened_and_why(run, tmp_path, capsys):
    generate = ["generate", str(run / "run"), "--input", str(run / "in.txt"), "--max-new-tokens", "2"]
    assert main(generate) == 0
    assert said(capsys) == [f"model: {run / 'run'}, checkpoint step_00000004 (the run's best)"]
    assert main([*generate, "--checkpoint", "step_00000002"]) == 0
    assert said(capsys) == [f"model: {run / 'run'}, checkpoint step_00000002 (as named)"]
    assert main(["export", str(run / "run"), "--out", str(tmp_path / "hf")]) == 0
    assert said(capsys) == [f"model: {run / 'run'}, checkpoint step_00000004 (the run's best)"]
    assert main(["generate", str(run / "run" / "checkpoints" / "step_00000002"), "--input", str(run / "in.txt")]) == 0
    assert said(capsys)[0].endswith("(a checkpoint directory on its own)")


def test_a_run_without_a_best_says_it_falls_back_to_the_latest(run, tmp_path, capsys):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run / "run", copy)
    (copy / "checkpoints" / "best").unlink()  # a run stopped before its first evaluation keeps none
    assert main(["generate", str(copy), "--input", str(run / "in.txt"), "--max-new-tokens", "2"]) == 0
    assert said(capsys) == [
        f"model: {copy}, checkpoint step_00000004 (the latest: the run has kept no best (no evaluation yet))"
    ]


def test_reports_of_two_checkpoints_on_one_file_are_both_kept_and_name_their_checkpoint(run, capsys):
    test = run / "test.tsv"
    test.write_text("red cat\tcat red\n")
    for checkpoint in ("best", "step_00000002"):
        assert main(["evaluate", str(run / "run"), "--data", str(test), "--checkpoint", checkpoint]) == 0
    best = json.loads((run / "run" / "eval" / "test" / "eval.json").read_text())["data"]
    other = json.loads((run / "run" / "eval" / "test" / "step_00000002" / "eval.json").read_text())["data"]
    assert (best["checkpoint"], best["checkpoint_chosen"]) == ("step_00000004", "the run's best")
    assert (other["checkpoint"], other["checkpoint_chosen"]) == ("step_00000002", "as named")


def test_a_refused_command_says_only_its_refusal(run, capsys):
    """The checkpoint line waits for the command's end: a refusal after the model opened stands alone."""
    assert main(["generate", str(run / "run"), "--input", str(run / "in.txt"), "--src-lang", "eng_Latn"]) != 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("encdec: error: ")
