"""A checkpoint's model.json carries which feed-forwards are mixtures of experts (moe_every, decoder_moe_every),
so the run reopens with experts in the same layers; a model.json written before those keys existed opens with
every feed-forward sparse, as such a run was trained."""

import json
from pathlib import Path

import pytest
import torch
from run_kit import NINE_PAIRS, tiny_pairs_run

from encdec.models.config_specs import MOVED, SPECS
from encdec.modules import MoE
from encdec.runs import open_model
from encdec.runs.run_dir import RunDir


def moe_run(root: Path, **model) -> Path:
    """A seq2seq run of 2 steps of t5-tiny with experts on nine word pairs, byte tokenizer, on the CPU."""
    return tiny_pairs_run(root, **NINE_PAIRS, **model)


def sparse(model) -> tuple[list[bool], list[bool]]:
    return tuple([isinstance(b.ffn, MoE) for b in stack.blocks] for stack in (model.encoder, model.decoder))


MOVED_PARTS = {flat: place.split(".") for flat, place in MOVED.items()}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return moe_run(tmp_path_factory.mktemp("sparse"), n_experts=2, n_encoder_layers=4, moe_every=2, decoder_moe_every=4)


def test_model_json_carries_the_sparse_layers_and_the_run_reopens_with_them(run_dir):
    checkpoint = RunDir(run_dir).checkpoint("latest")
    written = json.loads(checkpoint.model_config.read_text())
    assert (written["experts"]["every"], written["experts"]["decoder_every"]) == (2, 4)
    model = open_model(run_dir).run.model
    assert sparse(model) == ([False, True, False, True], [False, True, False, False])


def test_a_model_json_from_before_the_sparse_layers_opens_with_every_feed_forward_sparse(tmp_path):
    """A run of experts in every layer, its model.json written flat (the experts' fields by their old names, MOVED)
    and without moe_every and decoder_moe_every as one written before them was: it reopens with the same experts
    and weights."""
    run_dir = moe_run(tmp_path, n_experts=2)
    expected = open_model(run_dir).run.model.state_dict()
    model_json = RunDir(run_dir).checkpoint("latest").model_config
    old = json.loads(model_json.read_text())
    specs = {name: old.pop(name) for name in SPECS}
    old |= {flat: specs[spec][key] for flat, (spec, key) in MOVED_PARTS.items() if "moe_every" not in flat}
    model_json.write_text(json.dumps(old))
    reopened = open_model(run_dir).run.model
    assert sparse(reopened) == ([True, True], [True, True])
    assert all(torch.equal(reopened.state_dict()[k], v) for k, v in expected.items())
