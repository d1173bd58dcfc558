"""training.distill: the KL term is Hinton et al.'s on the tokens CE counts, the teacher reads exactly the
student's batches and stays out of its optimizer and checkpoints, a resumed run repeats its losses, and a
teacher that cannot teach this student is one sentence."""

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from run_kit import config_beside_runs, stories_data

from encdec.cli import main
from encdec.data.batch import IGNORE_INDEX
from encdec.models import ModelConfig, build_model
from encdec.models.loss import compute_loss, distillation_kl, distilled
from encdec.runs.checkpoint import load_checkpoint
from encdec.runs.load import load_run
from encdec.runs.run_dir import RunDir
from encdec.training import train
from encdec.training.experiments import last_interval_mean, markdown_table
from encdec.training.metrics import read_metrics
from encdec.training.run_config import load_config

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
CONFIG = {
    "model": {"preset": "rot5-tiny", "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64, "dropout": 0.1},
    "tokenizer": {"kind": "byte", "num_sentinels": 50},
    "data": stories_data(max_documents=120),
    "objective": {"kind": "ul2", "seq_len": 64},
    "optimizer": {"lr": 2e-3},
    "schedule": {"kind": "constant"},  # the same lr when a run is cut short and resumed
    "training": {"steps": 4, "batch_size": 4, "seed": 7, "threads": 1, "device": "cpu"},
    "evaluation": {"interval": 2, "steps": 1},
    "output": {"save_interval": 2, "keep_last": 3, "plot": False},
}


def records(run: Path) -> list[dict]:
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A config file and a teacher trained from it for 4 steps, wider than the student (48 against 32)."""
    root = tmp_path_factory.mktemp("distill")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    assert main(["train", str(config), "--out", str(root / "teacher"), "--set", "model.d_model=48"]) == 0
    return config, root / "teacher"


def tiny_batch():
    """Logits (1, 3, 4) of a student and a teacher, labels with the last position unscored."""
    student = torch.tensor([[[1.0, 0.0, -1.0, 2.0], [0.5, 0.5, 0.0, -2.0], [3.0, 1.0, 0.0, 0.0]]])
    teacher = torch.tensor([[[2.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, -1.0], [-9.0, 9.0, 0.0, 0.0]]])
    return student, teacher, torch.tensor([[3, 1, IGNORE_INDEX]])


def test_the_kl_equals_a_hand_computation_over_the_labelled_tokens():
    student, teacher, labels = tiny_batch()
    temperature = 2.0

    def softmax(row):
        exps = [math.exp(x / temperature) for x in row]
        return [e / sum(exps) for e in exps]

    per_token = []
    for s, t in zip(student[0].tolist()[:2], teacher[0].tolist()[:2]):  # the third position has no label
        p, q = softmax(t), softmax(s)
        per_token.append(sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q)))
    expected = sum(per_token) / 2
    assert distillation_kl(student, teacher, labels, temperature).item() == pytest.approx(expected, rel=1e-6)
    loss = compute_loss(student, labels, {}, ModelConfig())
    mixed = distilled(loss, student, teacher, labels, alpha=0.25, temperature=temperature)
    assert mixed.objective.item() == pytest.approx(0.75 * loss.ce.item() + 0.25 * 4 * expected, rel=1e-6)
    assert mixed.ce is loss.ce and mixed.distill_kl.item() == pytest.approx(expected, rel=1e-6)


def test_a_batch_without_labels_has_kl_zero_not_nan():
    student, teacher, _ = tiny_batch()
    assert distillation_kl(student, teacher, torch.full((1, 3), IGNORE_INDEX), 1.0).item() == 0.0


def test_alpha_one_with_a_copy_of_the_student_as_teacher_is_zero_and_alpha_zero_is_plain_ce():
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, dropout=0.0)
    model = build_model(cfg).eval()
    src, tgt = torch.randint(3, 40, (2, 5)), torch.randint(3, 40, (2, 4))
    labels = tgt.clone()
    labels[1, 2:] = IGNORE_INDEX
    teacher = build_model(cfg).requires_grad_(False).eval()
    teacher.load_state_dict(model.state_dict())
    with torch.no_grad():  # both: with gradients on, torch's CPU attention picks a kernel that rounds otherwise
        logits, taught = model(src, tgt).logits, teacher(src, tgt).logits
    loss = compute_loss(logits, labels, {}, cfg)
    assert distilled(loss, logits, taught, labels, alpha=1.0, temperature=2.0).objective.item() == 0.0
    plain = distilled(loss, logits, taught, labels, alpha=0.0, temperature=2.0)
    assert plain.objective is loss.objective  # the objective itself: the same value and the same gradients


def test_a_distilled_run_logs_ce_and_kl_and_its_checkpoints_hold_the_student_alone(setup, tmp_path):
    config, teacher = setup
    student = tmp_path / "student"
    assert main(["train", str(config), "--out", str(student), "--set", f"training.distill.teacher={teacher}"]) == 0
    logged = records(student)
    assert [r["step"] for r in logged] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["distill_kl"]) and r["distill_kl"] > 0 for r in logged)
    parts = load_checkpoint(RunDir(student).latest())
    alone = load_run(student, "latest").model  # the student opens without its teacher
    assert set(parts["model"]) == set(alone.state_dict())  # no teacher weights beside the student's
    assert len(parts["optimizer"]["state"]) == len(list(alone.parameters()))  # nor in the optimizer
    saved = yaml.safe_load((student / "config.yaml").read_text())
    assert saved["training"]["distill"] == {
        "teacher": str(teacher),
        "alpha": 0.5,
        "temperature": 2.0,
        "share_encoder": False,
    }


def test_alpha_zero_trains_exactly_as_without_a_teacher(setup, tmp_path):
    config, teacher = setup
    distill = ["training.distill.alpha=0", f"training.distill.teacher={teacher}"]
    train(load_config(config), tmp_path / "plain")
    train(load_config(config, distill), tmp_path / "alpha0")
    plain, alpha0 = records(tmp_path / "plain"), records(tmp_path / "alpha0")
    assert [r["loss"] for r in alpha0] == [r["loss"] for r in plain]  # bitwise: dropout's random stream untouched
    assert all(r["distill_kl"] > 0 for r in alpha0) and "distill_kl" not in plain[0]


def test_a_student_initialised_from_its_teacher_starts_at_kl_zero(setup, tmp_path):
    """The teacher reads exactly the student's inputs: with the same weights and no dropout, the same logits."""
    config, teacher = setup
    overrides = [f"training.init_from={teacher}", f"training.distill.teacher={teacher}", "model.dropout=0.0"]
    overrides += ["model.d_model=48"]  # the config file's own model keys go over the teacher's
    train(load_config(config, [*overrides, "training.distill.alpha=1", "training.steps=1"]), tmp_path / "copy")
    assert abs(records(tmp_path / "copy")[0]["distill_kl"]) < 1e-6  # the student's forward, with gradients,
    # takes another CPU attention kernel than the teacher's, which rounds the last bits otherwise


def test_a_resumed_distilled_run_repeats_the_uninterrupted_losses(setup, tmp_path):
    config, teacher = setup
    distill = [f"training.distill.teacher={teacher}", "training.steps=6"]
    train(load_config(config, distill), tmp_path / "full")
    train(load_config(config, [*distill, "training.steps=3"]), tmp_path / "cut")
    train(load_config(config, distill), tmp_path / "cut", resume=True)
    picked = [[(r["step"], r["loss"], r["distill_kl"]) for r in records(tmp_path / run)] for run in ("full", "cut")]
    assert picked[0] == picked[1] and len(picked[0]) == 6  # bitwise, dropout on, across the resume


def test_a_resumed_run_reads_the_teacher_it_started_with_though_the_teacher_run_trained_on(setup, tmp_path, capsys):
    """The teacher run's best checkpoint moves as it trains on; the student resumes with the weights it started
    with (teacher.json), and refuses in one sentence once those are gone and the run holds others."""
    config, _ = setup
    teacher = tmp_path / "teacher"
    assert main(["train", str(config), "--out", str(teacher), "--set", "model.d_model=48"]) == 0
    distill = [f"training.distill.teacher={teacher}", "training.steps=6"]
    train(load_config(config, distill), tmp_path / "full")
    train(load_config(config, [*distill, "training.steps=3"]), tmp_path / "cut")
    started = RunDir(teacher).checkpoint("best").path
    pointer = json.loads(RunDir(tmp_path / "cut").latest().teacher.read_text())
    assert pointer["teacher"] == str(teacher) and pointer["source"] == str(started) and len(pointer["sha256"]) == 64
    more = ["--set", "training.steps=10", "--set", "output.keep_last=10", "--set", "model.d_model=48"]
    assert main(["train", str(config), "--out", str(teacher), "--resume", *more]) == 0
    assert RunDir(teacher).checkpoint("best").path != started  # the teacher run's best has moved

    train(load_config(config, distill), tmp_path / "cut", resume=True)
    picked = [[(r["step"], r["loss"], r["distill_kl"]) for r in records(tmp_path / run)] for run in ("full", "cut")]
    assert picked[0] == picked[1]  # bitwise: the same teacher after the resume

    shutil.rmtree(started)
    before = {p: p.read_bytes() for p in sorted((tmp_path / "cut").rglob("*")) if p.is_file()}
    capsys.readouterr()
    code = main(["train", str(config), "--out", str(tmp_path / "cut"), "--resume", *(f"--set={s}" for s in distill)])
    err = capsys.readouterr().err
    assert code == 2 and "now holds other weights than this run was distilled from" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert {p: p.read_bytes() for p in sorted((tmp_path / "cut").rglob("*")) if p.is_file()} == before


def test_a_teacher_path_in_a_config_file_is_relative_to_its_folder(tmp_path, monkeypatch):
    config = config_beside_runs(
        tmp_path, monkeypatch, "teacher", "training:\n  distill:\n    teacher: ../runs/teacher\n"
    )
    assert load_config(config).training.distill.teacher == str(tmp_path / "runs" / "teacher")


@pytest.mark.parametrize(
    "overrides,says",
    [
        (["model.vocab_size=400"], "predicts 310 tokens and the student 400"),
        (["tokenizer.num_sentinels=49", "tokenizer.extra_specials=[<x>]"], "a byte tokenizer of other tokens"),
        (["training.distill.alpha=1.5"], "training.distill.alpha must be in [0, 1], got 1.5"),
        (["training.distill.temperature=0"], "training.distill.temperature must be positive, got 0.0"),
        (["training.distill.teacher=NOWHERE"], "is neither a run directory with checkpoints nor a Hugging Face"),
        (["training.distill.teacher=DATA"], "it has no checkpoints/latest and has no config.json"),
    ],
)
def test_a_teacher_that_cannot_teach_this_student_is_one_sentence(setup, tmp_path, capsys, overrides, says):
    config, teacher = setup
    paths = {"NOWHERE": str(tmp_path / "nowhere"), "DATA": str(SHARED_DATA)}
    sets = [f"training.distill.teacher={teacher}", *overrides]
    args = [a for s in sets for a in ("--set", next((s.replace(k, v) for k, v in paths.items() if k in s), s))]
    code = main(["train", str(config), "--out", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert code == 2 and says in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_experiment_table_gains_a_distill_kl_column_only_where_a_run_distils():
    history = [
        {"kind": "train", "step": 1, "distill_kl": 9.0},
        {"kind": "eval", "step": 1},
        {"kind": "train", "step": 2, "distill_kl": 1.0},
        {"kind": "train", "step": 3, "distill_kl": 2.0},
        {"kind": "eval", "step": 3},
    ]
    assert last_interval_mean(history, "distill_kl") == 1.5  # the steps since the last-but-one evaluation
    assert last_interval_mean(history, "grad_norm") is None
    row = {"run": "a", "seeds": 1, "train_loss": (1.0, 0.0), "val_loss": (2.0, 0.0), "parameters": 10}
    row |= {"parameters_without_positions": 9, "wall_time": 1.0, "tokens_per_s": 5.0}
    assert "distill KL" not in markdown_table([row])
    table = markdown_table([row, {**row, "run": "b", "distill_kl": (1.5, 0.0)}])
    assert "| val loss | distill KL |" in table and "| 2.0000 | - |" in table and "| 2.0000 | 1.5000 |" in table
