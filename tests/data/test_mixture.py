"""data.mixture: corpora drawn by weight, a batch each, deterministic and exact on resume, each member's
evaluation loss reported beside the mixture's."""

import json

import numpy as np
import pytest
import torch
import yaml

from encdec.cli import main
from encdec.data.objectives.mixture import MixtureObjective, proportional_weights
from encdec.errors import ConfigError
from encdec.training.run_config import load_config
from encdec.training.run_data import build_run_data

STORIES = "tinystories/tinystories_train_head.txt.gz"
DIALOGSUM = "summarization/dialogsum/dialogsum.dev.jsonl.gz"


def mixture_config(tmp_path, shared_data, weights=(3.0, 1.0), batch_size=1, **data) -> dict:
    stories = {"format": "tinystories", "train": [str(shared_data / STORIES)], "max_documents": 60, "val_fraction": 0.2}
    dialogues = {
        "format": "jsonl-pairs",
        "train": [str(shared_data / DIALOGSUM)],
        "max_documents": 80,
        "val_fraction": 0.2,
    }
    members = [
        {"name": "stories", "data": stories, "objective": {"kind": "span_corruption", "seq_len": 64}},
        {"name": "dialogsum", "data": dialogues, "objective": {"kind": "seq2seq", "source_template": "sum: {source}"}},
    ]
    for member, weight in zip(members, weights):
        if weight is not None:
            member["weight"] = weight
    return {
        "model": {"preset": "t5-tiny", "dropout": 0.0},
        "tokenizer": {"kind": "byte", "num_sentinels": 50},
        "data": {"mixture": members, **data},
        "objective": {"kind": "seq2seq", "max_source_len": 96, "max_target_len": 32},
        "training": {"steps": 4, "batch_size": batch_size, "threads": 1, "device": "cpu", "seed": 5},
        "evaluation": {"interval": 2, "steps": 2},
        "output": {"plot": False, "save_interval": 1},
    }


def load(tmp_path, values):
    path = tmp_path / "mixture.yaml"
    path.write_text(yaml.safe_dump(values))
    return load_config(path)


def test_each_member_is_drawn_in_its_weight_over_ten_thousand_examples(tmp_path, shared_data):
    data = build_run_data(load(tmp_path, mixture_config(tmp_path, shared_data)), tmp_path)
    mixture = data.train
    drawn = np.array([mixture.member_of(step) for step in range(10_000)])  # batch 1: a step is an example
    share = (drawn == 0).mean()
    assert abs(share - 0.75) < 4 * np.sqrt(0.75 * 0.25 / 10_000)  # within four standard errors
    for step in (0, 1, 17, 4095, 4096, 9_999):  # each batch is its member's, at the member's own position
        member = int(drawn[step])
        taken = int((drawn[:step] == member).sum())
        own = mixture.members[member]
        position = own.position
        for _ in range(taken):
            position = own.position_after(*position)
        expected, got = own.batch_at(*position), mixture.batch_at(0, step)
        assert torch.equal(expected.labels, got.labels) and torch.equal(expected.src_ids, got.src_ids)


def test_a_mixture_resumes_exactly_and_repeats_with_its_seed(tmp_path, shared_data):
    cfg = load(tmp_path, mixture_config(tmp_path, shared_data, batch_size=2))
    first = build_run_data(cfg, tmp_path).train
    straight = [first.next_batch() for _ in range(30)]
    resumed = build_run_data(cfg, tmp_path).train
    state = json.loads(json.dumps(first.state_dict()))  # as state.json holds it
    first.load_state_dict({**state, "step": 12})
    resumed.load_state_dict({**state, "step": 12})
    for expected in straight[12:]:
        got = resumed.next_batch()
        assert torch.equal(got.labels, expected.labels) and torch.equal(got.src_ids, expected.src_ids)


def test_examples_proportional_weights_with_a_cap_and_a_weight_of_zero(tmp_path, shared_data):
    assert proportional_weights([100, 10_000], cap=1_000) == [100.0, 1000.0]
    assert proportional_weights([3, 5]) == [3.0, 5.0]
    members = build_run_data(load(tmp_path, mixture_config(tmp_path, shared_data)), tmp_path).train.members
    assert {MixtureObjective(members, [0.0, 2.0]).member_of(s) for s in range(500)} == {1}
    with pytest.raises(ConfigError, match="one non-negative weight per member and a positive sum"):
        MixtureObjective(members, [0.0, 0.0])


def test_members_without_weights_weigh_their_example_counts(tmp_path, shared_data):
    cfg = load(tmp_path, mixture_config(tmp_path, shared_data, weights=(None, None), mixture_cap=40))
    mixture = build_run_data(cfg, tmp_path).train
    assert mixture.probabilities.tolist() == [0.5, 0.5]  # both members hold more than 40 training examples


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda v: v["data"]["mixture"][1].update(name="stories"), "data.mixture names 'stories' twice"),
        (lambda v: v["data"]["mixture"][1].pop("weight"), "give every data.mixture member a weight, or none"),
        (lambda v: v["data"].update(train=["x.txt"]), "with data.mixture the members name the corpora"),
        (lambda v: v["data"].update(max_documents=30), "set data.max_documents in the data section of each member"),
        (lambda v: v["data"].update(val_fraction=0.1), "set data.val_fraction in the data section of each member"),
        (lambda v: v["data"].update(mixture_cap=5), "data.mixture_cap caps example counts"),
        (lambda v: v["data"]["mixture"][0].update(weight=-1), r"data.mixture\[0\].weight must be positive"),
        (lambda v: v["data"]["mixture"][0]["objective"].update(kind="causal_lm"), "mixes decoder-only objectives"),
        (lambda v: v["data"]["mixture"][0]["objective"].update(seq_lenn=3), r"unknown key data.mixture\[0\].objective"),
    ],
)
def test_a_bad_mixture_is_one_sentence(tmp_path, shared_data, change, message):
    values = mixture_config(tmp_path, shared_data)
    change(values)
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, values)


def test_a_mixture_run_reports_each_members_loss(tmp_path, shared_data, capsys):
    path = tmp_path / "mixture.yaml"
    path.write_text(yaml.safe_dump(mixture_config(tmp_path, shared_data, batch_size=4)))
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["kind"] == "eval"][-1]
    for split in ("train", "val"):
        assert {f"{split}_loss/stories", f"{split}_loss/dialogsum"} <= set(last)
        assert np.isfinite([last[f"{split}_loss/stories"], last[f"{split}_loss/dialogsum"]]).all()
    assert last["val_loss/stories"] != last["val_loss/dialogsum"]


OWN_LIMITS = {  # a member's data section with its own max_documents, at the default val_fraction (5%)
    "stories": {"format": "tinystories", "train": [STORIES], "max_documents": 30},
    "dialogues": {"format": "jsonl-pairs", "train": [DIALOGSUM], "max_documents": 12},
    "streamed stories": {"format": "tinystories", "train": [STORIES], "max_documents": 30, "streaming": True},
}


@pytest.mark.parametrize("name", OWN_LIMITS)
def test_a_member_with_its_own_max_documents_trains(name, tmp_path, shared_data):
    """A few documents hash none to validation at 5%: the split still holds one out, so the member trains and
    reports its own validation loss instead of refusing an empty split."""
    data = {**OWN_LIMITS[name], "train": [str(shared_data / OWN_LIMITS[name]["train"][0])]}
    pairs = data["format"] == "jsonl-pairs"
    values = mixture_config(tmp_path, shared_data)
    values["data"]["mixture"] = [
        {"name": "own", "weight": 1.0, "data": data, "objective": {"kind": "seq2seq" if pairs else "span_corruption"}}
    ]
    values["objective"]["seq_len"] = 64
    path = tmp_path / "mixture.yaml"
    path.write_text(yaml.safe_dump(values))
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["kind"] == "eval"][-1]
    assert np.isfinite(last["val_loss/own"]) and np.isfinite(last["val_loss"])
