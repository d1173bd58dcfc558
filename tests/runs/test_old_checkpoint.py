"""Runs written before today's checkpoints load and generate the same tokens and texts, through the Python API
and the CLI: one from before the `runs/` layer existed (tests/fixtures/checkpoint_2ba69c1), and two from before
checkpoints described themselves (tests/fixtures/runs_ad614a0), read through their config.yaml."""

import json
import shutil
from pathlib import Path

import pytest
import torch

import encdec
import encdec.runs
from encdec.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_2ba69c1"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


@pytest.fixture(scope="module")
def model():
    return encdec.from_pretrained(FIXTURE / "run")


def test_the_run_encodes_its_inputs_as_before(model):
    tokenizer = encdec.load_tokenizer(FIXTURE / "run")
    template = "translate English to German: {source}"  # the run's source template, and its sources' length: 48
    assert [row[:48] for row in tokenizer.encode([template.format(source=text) for text in EXPECTED["inputs"]])] == [
        [i for i in row if i != model.config.pad_id] for row in EXPECTED["input_ids"]
    ]


@pytest.mark.parametrize("name, options", [("greedy", {}), ("beam3", {"num_beams": 3})])
def test_an_old_checkpoint_generates_the_same_tokens(model, name, options):
    ids = torch.tensor(EXPECTED["input_ids"])
    mask = ids != model.config.pad_id
    assert model.generate(ids, mask, max_new_tokens=12, **options).tolist() == EXPECTED[name]


@pytest.mark.parametrize(
    "args, expected", [([], "cli_greedy.txt"), (["--num-beams", "3", "--format", "jsonl"], "cli_beam3.jsonl")]
)
def test_encdec_generate_writes_the_same_text(args, expected, tmp_path):
    out = tmp_path / "out.txt"
    argv = [
        "generate",
        str(FIXTURE / "run"),
        "-i",
        str(FIXTURE / "inputs.txt"),
        "-o",
        str(out),
        "--max-new-tokens",
        "12",
        *args,
    ]
    assert main(argv) == 0
    assert out.read_text() == (FIXTURE / expected).read_text()


# Two runs written by encdec at commit ad614a0, the last before checkpoints described themselves: their
# checkpoints hold config.yaml but no model.json or text.json (tests/fixtures/runs_ad614a0/make.py made them).
BEFORE = Path(__file__).resolve().parents[1] / "fixtures" / "runs_ad614a0"
EXPECTED_BEFORE = json.loads((BEFORE / "expected.json").read_text())


@pytest.mark.parametrize("name", ["seq2seq", "lm"])
def test_a_run_from_before_descriptions_encodes_and_generates_as_it_did(name):
    expected = EXPECTED_BEFORE[name]
    opened = encdec.runs.open_model(BEFORE / name)
    assert not opened.run.checkpoint.model_config.exists()  # described by its config.yaml
    encoded = opened.text(expected["inputs"])
    assert encoded["input_ids"].tolist() == expected["input_ids"]  # template, padding side and length as then
    assert encoded["attention_mask"].int().tolist() == expected["attention_mask"]
    for label, options in {"greedy": {}, "beam3": {"num_beams": 3}}.items():
        ids = opened.model.generate(encoded["input_ids"], encoded["attention_mask"], max_new_tokens=12, **options)
        assert ids.tolist() == expected[label], label


@pytest.mark.parametrize("name", ["seq2seq", "lm"])
def test_a_checkpoint_from_before_descriptions_copied_out_of_its_run_writes_the_same_text(name, tmp_path):
    checkpoint = shutil.copytree(BEFORE / name / "checkpoints" / "step_00000400", tmp_path / "model")
    for model in (BEFORE / name, checkpoint):
        out = tmp_path / "out.txt"
        argv = ["generate", str(model), "-i", str(BEFORE / f"{name}_inputs.txt"), "-o", str(out)]
        assert main([*argv, "--max-new-tokens", "12"]) == 0
        assert out.read_text() == (BEFORE / f"cli_{name}.txt").read_text()
