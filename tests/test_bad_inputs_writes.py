"""Writes that cannot hurt: links planted in a run or an export directory, a foreign or unsafe --out, a run
that lost its pointers, an experiment naming a run outside --out, a full disk in torch's writer.

Every case checks the file a user could lose: a file outside the run that a link points to stays byte for
byte (and modification time) as it was, a refused command changes nothing anywhere below the test's
directory, and no checkpoint encdec did not just write disappears.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from bad_inputs_kit import progress, tiny

from encdec.cli import main
from encdec.runs.run_dir import RunDir

TINY = tiny(
    model={"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0},
    output={"save_interval": 2, "keep_last": 3, "plot": False, "tensorboard": False},
)
PRECIOUS = b"a user's file that encdec must never touch\n"


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """Made once: the tiny config (a T5 layout, so it exports) and a run trained 4 steps (checkpoints 2, 4)."""
    root = tmp_path_factory.mktemp("writes")
    (root / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    assert main(["train", str(root / "tiny.yaml"), "--out", str(root / "run"), *sets("training.steps=4")]) == 0
    return root


def sets(*overrides: str) -> list[str]:
    return [word for override in overrides for word in ("--set", override)]


def copy_run(library: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(library / "run", run)
    return run


def outside_file(tmp_path: Path) -> Path:
    victim = tmp_path / "outside" / "precious.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_bytes(PRECIOUS)
    return victim


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def snapshot(root: Path) -> dict:
    """Every entry below root, links not followed: a file's bytes and modification time, a link's target."""
    entries = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            entries[path] = ("link", os.readlink(path))
        elif path.is_dir():
            entries[path] = ("dir",)
        else:
            entries[path] = fingerprint(path)
    return entries


def one_sentence(capsys, *phrases: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert len(lines) == 1 and lines[0].startswith("encdec: error: ") and len(lines[0]) < 300, err
    assert "Traceback" not in err and all(phrase in lines[0] for phrase in phrases), err
    return lines[0]


@pytest.mark.parametrize(
    "name", ["metrics.jsonl", "config.yaml", ".lock", "summary.json", ".encdec-run", "checkpoints/.latest.tmp"]
)
def test_a_hard_link_at_a_run_file_is_replaced_and_never_written_through(library, tmp_path, capsys, name):
    run, victim = copy_run(library, tmp_path), outside_file(tmp_path)
    (run / name).unlink(missing_ok=True)
    os.link(victim, run / name)  # what a hostile user leaves: the run's file is the user's file under another name
    before = fingerprint(victim)
    argv = ["train", str(library / "tiny.yaml"), "--out", str(run), "--resume", *sets("training.steps=6")]
    assert main(argv) == 0, capsys.readouterr().err
    assert fingerprint(victim) == before
    assert RunDir(run).latest().name == "step_00000006"
    if name not in ("checkpoints/.latest.tmp", ".encdec-run"):  # fresh temporaries; a marker is only ever read
        assert not (run / name).samefile(victim)


@pytest.fixture(scope="module")
def exported(library) -> Path:
    out = library / "hf"
    assert main(["export", str(library / "run"), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("link", ["symlink", "hard link"])
@pytest.mark.parametrize(
    "name", ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
)
def test_a_link_at_an_export_file_is_replaced_and_its_target_unchanged(library, exported, tmp_path, name, link):
    out, victim = tmp_path / "hf", outside_file(tmp_path)
    shutil.copytree(exported, out)
    (out / name).unlink()
    (out / name).symlink_to(victim) if link == "symlink" else os.link(victim, out / name)
    before = fingerprint(victim)
    assert main(["export", str(library / "run"), "--out", str(out), "--force"]) == 0
    assert fingerprint(victim) == before
    assert not (out / name).is_symlink() and (out / name).read_bytes() == (exported / name).read_bytes()


def foreign_home(tmp_path: Path) -> Path:
    """A directory of someone's files that happens to look like a run's: config, metrics, a step directory."""
    home = tmp_path / "someone"
    (home / "checkpoints" / "step_00000001").mkdir(parents=True)
    (home / "checkpoints" / "step_00000001" / "weights.bin").write_bytes(b"\0" * 64)
    (home / "config.yaml").write_text("my: settings\n")
    (home / "metrics.jsonl").write_text('{"step": 1, "mine": true}\n')
    return home


def notes_dir(tmp_path: Path) -> Path:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_bytes(PRECIOUS)
    return tmp_path / "notes"


FOREIGN = {
    "train into a look-alike": (lambda t, lib: ["train", str(lib / "tiny.yaml"), "--out", str(foreign_home(t))]),
    "resume a look-alike": (
        lambda t, lib: ["train", str(lib / "tiny.yaml"), "--out", str(foreign_home(t)), "--resume"]
    ),
    "train into notes": (lambda t, lib: ["train", str(lib / "tiny.yaml"), "--out", str(notes_dir(t))]),
    "compare into notes": (lambda t, lib: ["compare", str(lib / "tiny.yaml"), "--out", str(notes_dir(t))]),
    "export into notes": (lambda t, lib: ["export", str(lib / "run"), "--out", str(notes_dir(t)), "--force"]),
    "export into a look-alike": (lambda t, lib: ["export", str(lib / "run"), "--out", str(foreign_home(t)), "--force"]),
}


@pytest.mark.parametrize("case", FOREIGN)
def test_an_out_holding_someone_elses_files_is_one_sentence_and_nothing_changes(library, tmp_path, capsys, case):
    argv = FOREIGN[case](tmp_path, library)
    before = snapshot(tmp_path)
    assert main(argv) == 2
    one_sentence(capsys, "choose")
    assert snapshot(tmp_path) == before


def fake_project(tmp_path: Path, monkeypatch) -> Path:
    """A checkout (pyproject.toml, .git) with the current directory inside it."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (project / "src").mkdir()
    monkeypatch.chdir(project / "src")
    return project


UNSAFE = {
    "empty": (lambda t, m: "", "not an empty string"),
    "root": (lambda t, m: "/", "file-system root"),
    "home": (lambda t, m: str(t / "home"), "the home directory"),
    "a parent of home": (lambda t, m: str(t), "a parent of the home directory"),
    "a project": (lambda t, m: str(fake_project(t, m)), "a project's checkout"),
    "a parent of the current directory": (lambda t, m: str(fake_project(t, m).parent), "a parent of the current"),
}


@pytest.mark.parametrize("command", ["train", "compare", "export"])
@pytest.mark.parametrize("case", UNSAFE)
def test_an_unsafe_out_is_refused(library, tmp_path, capsys, monkeypatch, command, case):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    build, says = UNSAFE[case]
    out = build(tmp_path, monkeypatch)
    source = library / ("run" if command == "export" else "tiny.yaml")
    before = snapshot(tmp_path)
    assert main([command, str(source), "--out", out]) == 2
    one_sentence(capsys, says)
    assert snapshot(tmp_path) == before


def without_pointers(library: Path, tmp_path: Path) -> Path:
    run = copy_run(library, tmp_path)
    (run / "checkpoints" / "latest").unlink()
    (run / "checkpoints" / "best").unlink()
    return run


def test_a_run_without_pointers_is_not_started_over(library, tmp_path, capsys):
    run = without_pointers(library, tmp_path)
    (run / ".lock").unlink()  # the lock's file is the one thing a refused training may write
    before = snapshot(tmp_path)
    assert main(["train", str(library / "tiny.yaml"), "--out", str(run)]) == 2
    one_sentence(capsys, "no checkpoints/latest pointer", "--resume")
    assert {p: v for p, v in snapshot(tmp_path).items() if p.name != ".lock"} == before


@pytest.mark.parametrize("newest_complete", [True, False])
def test_a_resume_without_pointers_continues_from_the_newest_complete_checkpoint(
    library, tmp_path, capsys, newest_complete
):
    """Rebuilt from step 4, or from step 2 when step 4 lacks a part; either way no step directory is lost."""
    run = without_pointers(library, tmp_path)
    if not newest_complete:
        (run / "checkpoints" / "step_00000004" / "optimizer.pt").unlink()
    steps = {p: p.read_bytes() for p in sorted((run / "checkpoints").rglob("*")) if p.is_file()}
    records = (run / "metrics.jsonl").read_text().splitlines()
    argv = ["train", str(library / "tiny.yaml"), "--out", str(run), "--resume", *sets("training.steps=6")]
    assert main(argv) == 0, capsys.readouterr().err
    resumed_from = 4 if newest_complete else 2
    kept = [line for line in records if json.loads(line)["step"] <= resumed_from]
    assert (run / "metrics.jsonl").read_text().splitlines()[: len(kept)] == kept
    assert RunDir(run).latest().name == "step_00000006"
    for path, data in steps.items():  # each file of each old step directory survives, set aside if replaced
        aside = Path(str(path).replace("step_00000004", "step_00000004.replaced-1"))
        assert (path if newest_complete else aside).read_bytes() == data


@pytest.mark.parametrize("name", ["../outside/x", "..", "a/b", "/abs/x", "seed"])
def test_an_experiment_run_name_that_is_not_a_plain_name_is_refused(library, tmp_path, capsys, name):
    spec = {"base": str(library / "tiny.yaml"), "runs": {name: {}}}
    if name == "seed":  # a seed is a directory name too
        spec["seeds"] = ["../../outside"]
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(yaml.safe_dump(spec))
    outside_file(tmp_path)
    before = snapshot(tmp_path)
    assert main(["compare", "--experiment", str(experiment), "--out", str(tmp_path / "out")]) == 2
    one_sentence(capsys, "seeds[0] must be an integer" if name == "seed" else "is not a plain name")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("fails_at, free", [(1, 0), (2, 0), (1, 1 << 40)])
def test_torch_failing_to_write_a_checkpoint_names_a_full_disk_and_what_was_kept(
    library, tmp_path, capsys, monkeypatch, fails_at, free
):
    """torch.save raises `[enforce fail at inline_container.cc:672]` on a full disk, after a partial file."""
    import encdec.runs.checkpoint as checkpoint

    real, calls = torch.save, []

    def fails(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == fails_at:
            Path(path).write_bytes(b"\0" * 1024)
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
                "file write failed"
            )
        real(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", fails)
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: free)
    run = tmp_path / "run"
    assert main(["train", str(library / "tiny.yaml"), "--out", str(run), *sets("training.steps=4")]) == 2
    line = one_sentence(capsys, "writing checkpoint")
    assert ("the disk is full" in line) == (free == 0) and "enforce fail" not in line
    if fails_at == 1:
        assert "no checkpoint was kept" in line and "intact" not in line
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == []
    else:
        assert "the previous checkpoint is intact (step_00000002)" in line
        assert RunDir(run).latest().name == "step_00000002"


@pytest.mark.parametrize("name", ["train.text.bin", "train.text.idx.npy"])
def test_a_hard_link_in_a_shard_directory_is_replaced_not_written_through(tmp_path, name):
    from encdec.data.shards import prepare_shards, read_shards
    from encdec.tokenizers import build_tokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("once upon a time\n\nthere was a girl\n")
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"a user's file\n")
    out = tmp_path / "shards"
    out.mkdir()
    os.link(precious, out / name)
    prepare_shards(out, build_tokenizer("byte"), "text", [corpus], progress=False)
    assert precious.read_bytes() == b"a user's file\n" and os.stat(out / name).st_nlink == 1
    assert len(read_shards(out).fields["text"]) == 2


@pytest.mark.parametrize("existed", [False, True])
def test_a_run_that_fails_to_start_leaves_no_empty_run_directory(library, tmp_path, existed):
    out = tmp_path / "out"
    if existed:
        out.mkdir()  # the user's own empty directory stays; only what encdec wrote goes
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(tiny(data={**TINY["data"], "train": [str(tmp_path / "absent.txt")]})))
    assert main(["train", str(config), "--out", str(out)]) == 2
    assert (out.is_dir() and not any(out.iterdir())) if existed else not out.exists()
