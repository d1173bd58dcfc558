"""A resume takes every part its checkpoint declares (its parts, and those its config keeps: training.ema_decay's
ema.safetensors) as saved, or refuses in one sentence naming the file: a part missing, truncated, of other keys
or shapes, or holding NaN or infinity is never a fresh start or a run that trains on garbage."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from bad_inputs_kit import tiny
from safetensors.torch import load_file, save_file

from encdec.cli import main
from encdec.runs.checkpoint import declared_parts, load_weights, save_weights, saved_values
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.training.metrics import read_metrics

EMA = ["--set", "training.ema_decay=0.8"]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> tuple[Path, Path]:
    """A config and an EMA run trained 2 of its 4 steps (checkpoint step_00000002), made once."""
    root = tmp_path_factory.mktemp("parts")
    config = root / "tiny.yaml"
    values = tiny(training={"steps": 4, "batch_size": 4, "threads": 1, "device": "cpu", "ema_decay": 0.8})
    values["output"] = {"save_interval": 2, "plot": False}
    values["evaluation"] = {"interval": 4, "steps": 1}
    values["schedule"] = {"kind": "constant"}  # the same lr when a run is cut short and resumed
    config.write_text(yaml.safe_dump(values))
    assert main(["train", str(config), "--out", str(root / "run"), "--set", "training.steps=2"]) == 0
    return config, root / "run"


def copy_run(library, tmp_path) -> tuple[Path, CheckpointDir]:
    run = tmp_path / "run"
    shutil.copytree(library[1], run)
    return run, RunDir(run).latest()


def files(run: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def refused(config: Path, run: Path, capsys, *extra: str) -> str:
    """Resume `run`: a non-zero exit, one stderr line without a traceback, the run's files unchanged; the line."""
    before = files(run)
    capsys.readouterr()
    code = main(["train", str(config), "--out", str(run), "--resume", *extra])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("encdec: error: ") and len(err.rstrip("\n")) < 300, err
    assert files(run) == before
    return err


def test_an_ema_run_declares_its_ema_and_a_plain_run_does_not(library):
    checkpoint = RunDir(library[1]).latest()
    declared = declared_parts(checkpoint, saved_values(checkpoint))
    assert CheckpointDir.EMA in declared and CheckpointDir.TEACHER not in declared
    assert set(declared) - set(CheckpointDir.OPTIONAL) == set(CheckpointDir.PARTS) - set(CheckpointDir.OPTIONAL)
    plain = saved_values(checkpoint)
    plain["training"]["ema_decay"] = 0.0
    assert CheckpointDir.EMA not in declared_parts(checkpoint, plain)


def test_every_declared_part_missing_is_refused_naming_it(library, tmp_path, capsys):
    """Whatever the part (weights, optimizer, RNG, state, tokenizer, the EMA its config keeps), not a fresh start."""
    checkpoint = RunDir(library[1]).latest()
    for part in declared_parts(checkpoint, saved_values(checkpoint)):
        if part == CheckpointDir.CONFIG:
            continue  # what declares the rest: its own refusal below
        run, latest = copy_run(library, tmp_path / part)
        target = latest.path / part
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        err = refused(library[0], run, capsys)
        assert f"has no {part}" in err, err
    run, latest = copy_run(library, tmp_path / "config")
    (latest.path / CheckpointDir.CONFIG).unlink()
    assert "config" in refused(library[0], run, capsys)


def test_a_missing_ema_names_the_key_that_keeps_it(library, tmp_path, capsys):
    run, latest = copy_run(library, tmp_path)
    latest.ema.unlink()
    assert "has no ema.safetensors, which its config keeps (training.ema_decay is set)" in refused(
        library[0], run, capsys
    )


def nan_first(tensors: dict, value: float) -> dict:
    """`tensors` with one value of its first floating-point tensor replaced by `value` (NaN, infinity)."""
    name = next(k for k in sorted(tensors) if tensors[k].is_floating_point())
    changed = tensors[name].clone()
    changed.view(-1)[0] = value
    return {**tensors, name: changed}


def renamed(tensors: dict) -> dict:
    first = sorted(tensors)[0]
    return {("renamed." + k if k == first else k): v for k, v in tensors.items()}


def reshaped(tensors: dict) -> dict:
    name = next(k for k in sorted(tensors) if tensors[k].dim() >= 1)
    return {**tensors, name: torch.zeros(tensors[name].numel() + 1, dtype=tensors[name].dtype)}


def damaged_optimizer(damage: str):
    """The optimizer state with one moment of its first parameter damaged as `damage` says."""

    def damaged(state: dict) -> dict:
        first = sorted(state["state"])[0]
        moments = state["state"][first]
        if damage in ("nan", "inf"):
            moments = nan_first(moments, float(damage))
        elif damage == "renamed":
            state["state"]["renamed." + first] = state["state"].pop(first)
        elif damage == "reshaped":
            moments = reshaped({k: v for k, v in moments.items() if k != "step"}) | {"step": moments["step"]}
        if damage != "renamed":
            state["state"][first] = moments
        return state

    return damaged


DAMAGE = {
    "nan": lambda tensors: nan_first(tensors, float("nan")),
    "inf": lambda tensors: nan_first(tensors, float("inf")),
    "renamed": renamed,
    "reshaped": reshaped,
}


@pytest.mark.parametrize("damage", ["nan", "inf", "truncated", "renamed", "reshaped"])
@pytest.mark.parametrize("part", [CheckpointDir.MODEL, CheckpointDir.EMA, CheckpointDir.OPTIMIZER])
def test_a_damaged_tensor_part_is_refused_naming_it(library, tmp_path, capsys, part, damage):
    """Each tensor part a resume reads, whatever is wrong with it: one sentence naming its file."""
    run, latest = copy_run(library, tmp_path)
    path = latest.path / part
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif part == CheckpointDir.OPTIMIZER:
        torch.save(damaged_optimizer(damage)(torch.load(path, weights_only=True)), path)
    else:
        save_weights(DAMAGE[damage](load_weights(path)), path)
    err = refused(library[0], run, capsys)
    assert part in err, err
    if damage in ("nan", "inf") and part != CheckpointDir.OPTIMIZER:
        assert "NaN or infinite" in err, err


def test_a_random_state_torch_cannot_restore_is_refused(library, tmp_path, capsys):
    """The right size and type, but bytes that are no Mersenne Twister state."""
    run, latest = copy_run(library, tmp_path)
    states = load_file(latest.rng)
    states["torch"] = torch.zeros_like(states["torch"])
    save_file(states, latest.rng)
    assert "rng.safetensors: torch is not a random state torch can restore" in refused(library[0], run, capsys)


def test_an_intact_ema_resumes_bitwise(library, tmp_path):
    full = tmp_path / "full"
    assert main(["train", str(library[0]), "--out", str(full)]) == 0
    run, _ = copy_run(library, tmp_path)
    assert main(["train", str(library[0]), "--out", str(run), "--resume"]) == 0
    a, b = (load_weights(RunDir(r).latest().ema) for r in (full, run))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [
        [(r["step"], r["loss"]) for r in read_metrics(r / "metrics.jsonl") if r["kind"] == "train"] for r in (full, run)
    ]
    assert losses[0] == losses[1]


def test_an_ema_turned_on_at_a_resume_starts_from_the_weights(library, tmp_path):
    """A checkpoint whose config kept no EMA declares none: with the change accepted, the average starts anew."""
    run = tmp_path / "plain"
    config = tmp_path / "plain.yaml"
    values = yaml.safe_load(library[0].read_text())
    values["training"]["ema_decay"] = 0.0
    config.write_text(yaml.safe_dump(values))
    assert main(["train", str(config), "--out", str(run), "--set", "training.steps=2"]) == 0
    assert not RunDir(run).latest().ema.exists()
    assert main(["train", str(library[0]), "--out", str(run), "--resume", "--accept-changes"]) == 0
    assert RunDir(run).latest().ema.is_file()


def test_a_lost_latest_pointer_resumes_from_the_newest_checkpoint_holding_every_declared_part(library, tmp_path):
    run, latest = copy_run(library, tmp_path)
    assert main(["train", str(library[0]), "--out", str(run), "--resume"]) == 0  # step_00000004 beside _00000002
    newest = RunDir(run).latest()
    newest.ema.unlink()
    (run / "checkpoints" / "latest").unlink()
    assert main(["train", str(library[0]), "--out", str(run), "--resume"]) == 0  # from step 2 again: complete
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    assert steps[-2:] == [3, 4] and RunDir(run).latest().ema.is_file()
    assert json.loads(RunDir(run).latest().state.read_text())["train"]["step"] == 4


@pytest.fixture(scope="module")
def distilled(library, tmp_path_factory) -> Path:
    """A run distilled (2 of 4 steps) from the library's run as its teacher."""
    run = tmp_path_factory.mktemp("distilled") / "run"
    teacher = ["--set", f"training.distill.teacher={library[1]}", "--set", "training.steps=2"]
    assert main(["train", str(library[0]), "--out", str(run), *teacher]) == 0
    return run


@pytest.mark.parametrize("damage", ["deleted", "through a symlink", "relative", "a file"])
def test_a_teacher_pointer_deleted_or_breaking_the_path_rules_is_refused_at_resume(
    library, distilled, tmp_path, capsys, damage
):
    """teacher.json is declared by training.distill: gone, it is refused (not the teacher run's best of now);
    a source that is not the real checkpoint directory encdec wrote is refused, not followed."""
    run = tmp_path / "run"
    shutil.copytree(distilled, run)
    pointer_path = RunDir(run).latest().teacher
    pointer = json.loads(pointer_path.read_text())
    if damage == "deleted":
        pointer_path.unlink()
    else:
        teacher = Path(pointer["source"])
        (tmp_path / "link").symlink_to(teacher.parent.parent)
        (tmp_path / "file").write_text("x\n")
        source = {
            "through a symlink": str(tmp_path / "link" / "checkpoints" / teacher.name),
            "relative": str(teacher.relative_to(teacher.parents[2])),
            "a file": str(tmp_path / "file"),
        }[damage]
        pointer_path.write_text(json.dumps({**pointer, "source": source}))
    err = refused(library[0], run, capsys, "--set", f"training.distill.teacher={library[1]}")
    assert "teacher.json" in err, err


@pytest.fixture(scope="module", params=["adamw", "adafactor", "adamw_scale"])
def optimizer_run(request, library, tmp_path_factory) -> tuple[Path, Path]:
    """A config and a run of 2 steps with each optimizer kind (each keeps other moments: Adafactor's factored)."""
    root = tmp_path_factory.mktemp(request.param)
    config = root / "tiny.yaml"
    values = yaml.safe_load(library[0].read_text())
    values["optimizer"] = {"kind": request.param, "lr": 2e-3}
    config.write_text(yaml.safe_dump(values))
    assert main(["train", str(config), "--out", str(root / "run"), "--set", "training.steps=2"]) == 0
    return config, root / "run"


@pytest.mark.parametrize("damage", ["a moment dropped", "every moment one longer", "a moment of another rank"])
def test_optimizer_state_not_as_its_own_step_keeps_it_is_refused(optimizer_run, tmp_path, capsys, damage):
    """Whatever the optimizer, each parameter's saved state is what one step of it keeps (not a moment loading
    would silently start again from zero, nor one of another shape); an intact one resumes."""
    config, library_run = optimizer_run
    run = tmp_path / "run"
    shutil.copytree(library_run, run)
    path = RunDir(run).latest().optimizer
    state = torch.load(path, weights_only=True)
    for moments in state["state"].values():
        names = [k for k in sorted(moments) if k != "step"]
        if damage == "a moment dropped":
            del moments[names[0]]
        elif damage == "every moment one longer":
            moments.update({k: torch.zeros(moments[k].numel() + 1) for k in names})
        else:
            moments.update({k: moments[k].reshape(-1) for k in names if moments[k].dim() > 1})
    torch.save(state, path)
    assert "optimizer.pt does not hold the state of this model's" in refused(config, run, capsys)
    shutil.copy(RunDir(library_run).latest().optimizer, path)
    assert main(["train", str(config), "--out", str(run), "--resume"]) == 0
