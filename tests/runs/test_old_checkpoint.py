"""A run written before the `runs/` layer existed (tests/fixtures/checkpoint_2ba69c1) loads and
generates the same tokens and texts, through the Python API and the CLI."""

import json
from pathlib import Path

import pytest
import torch

import encdec
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
