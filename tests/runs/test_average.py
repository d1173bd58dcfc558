"""`encdec average`: the element-wise mean of a run's checkpoints, written as a checkpoint of its own that
evaluates, generates and exports like any other, and refused in one sentence where it cannot be made."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from run_kit import tiny_stories_run

from encdec.cli import main
from encdec.runs.checkpoint import load_weights, save_weights
from encdec.runs.open import open_model
from encdec.runs.run_dir import RunDir
from encdec.runs.weight_average import average_checkpoints


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tinystories_path):
    """A T5 run of 4 steps keeping a checkpoint at each of the last 3, byte tokenizer, on the CPU."""
    return tiny_stories_run(tmp_path_factory.mktemp("average"), tinystories_path, steps=4, save_interval=1, keep_last=3)


@pytest.fixture
def run_copy(run_dir, tmp_path):
    """A copy of the run each test may add checkpoints to."""
    return shutil.copytree(run_dir, tmp_path / "run")


def weights(run, name):
    return load_weights(RunDir(run).checkpoint(name).model)


def test_averaging_identical_checkpoints_gives_that_checkpoint_bit_for_bit(run_copy):
    run = RunDir(run_copy)
    newest = run.step_dirs()[-1]
    for older in run.step_dirs()[:-1]:  # every kept checkpoint made a copy of the newest one's weights
        shutil.copyfile(newest / "model.safetensors", older / "model.safetensors")
    made = average_checkpoints(run_copy, last=3)
    assert made.name == "avg3_step_00000004"
    original, averaged = load_weights(newest / "model.safetensors"), load_weights(made.model)
    assert original.keys() == averaged.keys()
    assert all(torch.equal(original[k], averaged[k]) and original[k].dtype == averaged[k].dtype for k in original)


def test_averaging_two_checkpoints_gives_the_mean_of_each_tensor(run_copy):
    made = average_checkpoints(run_copy, steps=[2, 4])
    a, b, mean = weights(run_copy, "step_00000002"), weights(run_copy, "step_00000004"), load_weights(made.model)
    assert not torch.equal(a["decoder.blocks.0.cross_attn.q.weight"], b["decoder.blocks.0.cross_attn.q.weight"])
    for name in a:
        assert torch.allclose(mean[name], (a[name].double() + b[name].double()).div(2).float(), atol=0, rtol=0)


def test_the_averaged_checkpoint_evaluates_generates_and_exports_and_nothing_else_changes(run_copy, tmp_path, capsys):
    run = RunDir(run_copy)
    before = {p.name: (p / "model.safetensors").read_bytes() for p in run.step_dirs()}
    pointers = (run.pointer("latest"), run.pointer("best"))
    assert main(["average", str(run_copy), "--last", "3"]) == 0
    assert "--checkpoint avg3_step_00000004" in capsys.readouterr().out
    assert {p.name: (p / "model.safetensors").read_bytes() for p in run.step_dirs()} == before
    assert (run.pointer("latest"), run.pointer("best")) == pointers  # never latest, best, a step or a resume
    name = ["--checkpoint", "avg3_step_00000004"]
    assert main(["evaluate", str(run_copy), *name, "--out", str(tmp_path / "eval"), "--batches", "1"]) == 0
    source = tmp_path / "in.txt"
    source.write_text("Once upon a time\n")
    out = tmp_path / "out.txt"
    assert main(["generate", str(run_copy), *name, "-i", str(source), "-o", str(out), "--max-new-tokens", "4"]) == 0
    assert out.is_file()
    assert main(["export", str(run_copy), *name, "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file()


def test_out_writes_a_new_run_directory_that_opens_like_a_run(run_copy, tmp_path):
    out = tmp_path / "averaged"
    assert main(["average", str(run_copy), "--last", "2", "--out", str(out)]) == 0
    assert RunDir(out).is_run() and (out / "config.yaml").is_file()
    made = load_weights(RunDir(out).checkpoint("best").model)
    expected = load_weights(average_checkpoints(run_copy, last=2).model)
    assert all(torch.equal(made[k], expected[k]) for k in made)
    assert main(["export", str(out), "--out", str(tmp_path / "hf")]) == 0


@pytest.mark.parametrize(
    "args, words",
    [
        (["--last", "9"], "keeps 3"),
        (["--steps", "1,4"], "no checkpoint of step 1"),
        (["--steps", "4,4"], "twice"),
        (["--steps", "a,b"], "--steps[0] must be an integer, got 'a'"),
        (["--steps", "1," + "9" * 5_000], "--steps takes numbers of at most 100 characters, got 5,000"),
        ([], "--last N or --steps"),
        (["--last", "2", "--out", "{run}/inside"], "inside the run"),
        (["--last", "2", "--out", "{tmp}/full"], "not an empty directory"),
        (["--ema"], "no EMA weights"),
    ],
)
def test_refusals_are_one_sentence_and_exit_2(run_copy, tmp_path, capsys, args, words):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    args = [a.format(run=run_copy, tmp=tmp_path) for a in args]
    assert main(["average", str(run_copy), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not (run_copy / "inside").exists()


def test_checkpoints_of_different_shapes_and_an_existing_average_are_refused(run_copy, capsys):
    older = RunDir(run_copy).step_dirs()[0] / "model.safetensors"
    state = load_weights(older)
    key = "decoder.blocks.0.cross_attn.q.weight"
    state[key] = state[key][:-1].clone()
    save_weights(state, older)
    assert main(["average", str(run_copy), "--last", "3"]) == 2
    assert "different architectures" in capsys.readouterr().err
    assert main(["average", str(run_copy), "--last", "2"]) == 0
    assert main(["average", str(run_copy), "--last", "2"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_an_average_describes_itself_as_its_checkpoints_do_and_one_of_an_older_run_too(run_copy, tmp_path):
    """model.json and text.json beside the mean, copied from a described checkpoint, else written from the
    config.yaml of a run from before them (tests/fixtures/runs_ad614a0)."""
    newest = RunDir(run_copy).latest()
    made = average_checkpoints(run_copy, last=2)
    for part in ("model.json", "text.json"):
        assert (made.path / part).read_bytes() == (newest.path / part).read_bytes()
    older = shutil.copytree(Path(__file__).parents[1] / "fixtures" / "runs_ad614a0" / "seq2seq", tmp_path / "old")
    made = average_checkpoints(older, last=1)
    opened = open_model(older, made.name)
    assert json.loads(made.model_config.read_text()) == opened.model.config.to_dict()
    assert json.loads(made.text.read_text())["source_template"] == "translate English to German: {source}"
