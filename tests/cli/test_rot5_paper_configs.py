"""configs/seeds/rot5: seed 004's runs at the paper's sizes load, validate and report their size offline."""

from pathlib import Path

import pytest

from encdec.cli import main
from encdec.training.run_config import load_config

ROOT = Path(__file__).parents[2] / "configs" / "seeds" / "rot5"
PARAMETERS = {  # encdec size, with Mistral's 32,000 pieces + pad, 500 sentinels and a decoder start
    "rot5_mini_pretrain.yaml": 46_814_208,
    "rot5_mini_moe8_pretrain.yaml": 120_296_448,
    "rot5_base_pretrain.yaml": 194_878_464,
    "rot5_base_moe8_pretrain.yaml": 987_749_376,
    "rot5_mini_summarize.yaml": 46_814_208,
}
EXAMPLES_A_STEP = {"mini": 1280, "base": 300, "base_moe8": 256}  # the seed's effective batches


pytestmark = pytest.mark.usefixtures("no_network")  # sizing a config reads the local tokenizer file only


def test_the_folder_holds_the_configs_sized_here():
    assert sorted(p.name for p in ROOT.glob("*.yaml")) == sorted(PARAMETERS)


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_config_validates_and_reports_its_parameters(name, capsys):
    cfg = load_config(ROOT / name)
    assert cfg.training.device == "cuda" and cfg.training.precision == "bf16"
    assert main(["size", str(ROOT / name)]) == 0
    out = capsys.readouterr().out
    assert "vocabulary 32,502" in out and f"parameters:                    {PARAMETERS[name]:,}" in out


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_header_says_how_to_run_it_and_what_it_costs(name):
    header = (ROOT / name).read_text().split("\nmodel:")[0]
    assert f"encdec train configs/seeds/rot5/{name} --out runs/" in header
    assert "# Cost (estimated, not measured)" in header and "H100" in header and "H200" in header


def test_pretraining_budgets_are_the_seeds_epochs():
    def config(name):
        return load_config(ROOT / f"rot5_{name}_pretrain.yaml")

    mini = config("mini")
    assert mini.data.format == "instruct-records" and mini.objective.kind == "ul2"
    assert mini.training.batch_size * mini.training.grad_accum == EXAMPLES_A_STEP["mini"]
    assert mini.training.steps == 2 * -(-2_476_533 // 1280)  # 2 epochs of the Instruct records
    base, base_moe = config("base"), config("base_moe8")
    assert base.training.steps * EXAMPLES_A_STEP["base"] >= 2_119_719 > (base.training.steps - 1) * 300
    assert base_moe.training.steps * EXAMPLES_A_STEP["base_moe8"] >= 2_119_719 > (base_moe.training.steps - 1) * 256
    assert base_moe.training.batch_size * base_moe.training.grad_accum == EXAMPLES_A_STEP["base_moe8"]
    assert base_moe.model["experts"]["count"] == config("mini_moe8").model["experts"]["count"] == 8


STORIES = Path(__file__).parents[3] / "shared" / "data" / "tinystories" / "tinystories_train_head.txt.gz"


@pytest.fixture(scope="module")
def instruct_file(tmp_path_factory) -> Path:
    """20 TinyStoriesInstruct-format records (Features / Words / Summary / Story) made from TinyStories stories."""
    import gzip

    with gzip.open(STORIES, "rt", encoding="utf-8") as f:
        stories = [s.strip() for s in f.read().split("<|endoftext|>") if s.strip()][:20]
    records = [
        f"Features: Dialogue\nWords: {' '.join(story.split()[:3])}\nSummary: {story.split('. ')[0]}.\nStory: \n\n{story}"
        for story in stories
    ]
    path = tmp_path_factory.mktemp("instruct") / "instruct.txt"
    path.write_text("\n<|endoftext|>\n".join(records) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("name", [n for n in sorted(PARAMETERS) if "pretrain" in n])
def test_first_step_runs_on_cpu_at_one_layer(name, instruct_file, tmp_path):
    """Each pretraining config takes its first step as written but for the device, precision, depth, batch and
    data (its tokenizer, objective, format and the rest of its model as the GPU run has them)."""
    data = instruct_file if "mini" in name else STORIES
    overrides = [
        "training.device=cpu", "training.precision=fp32", "training.steps=1", "training.batch_size=2",
        "training.grad_accum=1", "evaluation.steps=1", "evaluation.interval=1", "model.n_encoder_layers=1",
        f'data.train=["{data}"]', f'data.validation=["{data}"]', f"data.shards={tmp_path / 'shards'}",
    ]  # fmt: skip
    args = ["train", str(ROOT / name), "--out", str(tmp_path / "run")]
    assert main([*args, *[a for o in overrides for a in ("--set", o)]]) == 0
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count('"kind": "train"') == 1
