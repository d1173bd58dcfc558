"""Every run of every experiment file under configs/experiments trains its first step, as `encdec compare`
would start it: the run's own config and overrides, its first seed, one step and one evaluation batch, on
40 stories of its TinyStories data (its tokenizer trained on them) or 40 of its DialogSum dialogues. A run
that starts from another run (a fine-tuning's training.init_from, a distillation's teacher) starts from a
one-step run of the experiment file that makes it, trained here on the same stories."""

import gzip
from pathlib import Path

import pytest

from encdec.training.experiments import read_experiment, seeded
from encdec.training.run_config import load_config
from encdec.training.trainer import train

EXPERIMENTS = Path(__file__).resolve().parents[2] / "configs" / "experiments"
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
STORIES = DATA / "tinystories" / "tinystories_train_head.txt.gz"
DIALOGUES = DATA / "summarization" / "dialogsum" / "dialogsum.train.jsonl.gz"
FIRST_STEP = ["training.steps=1", "evaluation.interval=1", "evaluation.steps=1", "training.batch_size=2"]
# paths to runs another experiment trains
MADE_ELSEWHERE = ("training.init_from=", "training.init_decoder_from=", "training.distill.teacher=")
# the experiments others start from, each after those it starts from
MADE_FIRST = ("rot5_ablation_cpu", "rot5_teacher_cpu", "adapt_sources_cpu", "adapt_cpu", "adapt_scratch_cpu")


@pytest.fixture(scope="module")
def stories(tmp_path_factory) -> Path:
    """The first 40 stories of the TinyStories sample."""
    with gzip.open(STORIES, "rt", encoding="utf-8") as f:
        text = f.read()
    path = tmp_path_factory.mktemp("stories") / "stories.txt"
    path.write_text("<|endoftext|>".join(text.split("<|endoftext|>")[:40]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def dialogues(tmp_path_factory) -> Path:
    """The first 40 DialogSum training dialogues (JSONL)."""
    with gzip.open(DIALOGUES, "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(40)]
    path = tmp_path_factory.mktemp("dialogues") / "dialogues.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def made_runs(tmp_path_factory, stories) -> dict[str, Path]:
    """One-step runs of the experiments other experiments start from: {path an experiment names: run}."""
    made = {}
    for experiment in MADE_FIRST:
        runs, seeds = read_experiment(EXPERIMENTS / f"{experiment}.yaml")
        for run in runs:
            seed = (seeds or [1])[0]
            out = tmp_path_factory.mktemp("made") / run.name
            overrides = from_made_runs(seeded(run.overrides, seed), made)
            train(load_config(run.config, cut(overrides, stories, None)), out)
            made[f"runs/experiments/{experiment}/{run.name}/seed{seed}"] = out
    return made


def from_made_runs(overrides: list[str], made: dict[str, Path]) -> list[str]:
    """`overrides` with each run another experiment trains replaced by its one-step run here."""
    overrides = list(overrides)
    for i, value in enumerate(overrides):
        if value.startswith(MADE_ELSEWHERE):
            key, named = value.split("=", 1)
            overrides[i] = f'{key}="{made[named.strip(chr(34))]}"'
    return overrides


def cut(overrides: list[str], data: Path, seed: int | None) -> list[str]:
    """The run's overrides for one first step on `data`, with `seed` as encdec compare sets it."""
    return seeded(overrides, seed) + FIRST_STEP + [f'data.train=["{data}"]', f'data.validation=["{data}"]']


def runs_of_every_experiment():
    params = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        runs, seeds = read_experiment(path)
        params += [pytest.param(run, (seeds or [None])[0], id=f"{path.stem}:{run.name}") for run in runs]
    return params


@pytest.mark.parametrize(("run", "seed"), runs_of_every_experiment())
def test_every_experiment_run_trains_its_first_step(run, seed, stories, dialogues, made_runs, tmp_path):
    overrides = from_made_runs(seeded(run.overrides, seed), made_runs)
    data = {"tinystories": stories, "jsonl-pairs": dialogues}[load_config(run.config, overrides).data.format]
    result = train(load_config(run.config, cut(overrides, data, None)), tmp_path / "run")
    assert result.steps == 1 and result.val_loss is not None and result.val_loss < 100
