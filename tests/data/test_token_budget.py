"""training.batch_tokens (fairseq's --max-tokens): seq2seq batches sized by a token budget, length-bucketed,
every example once an epoch, exact on resume; refused with packing, other objectives and under torchrun."""

import json

import numpy as np
import pytest
import torch
import yaml

from encdec.cli import main
from encdec.data.corpora import iter_jsonl_pairs
from encdec.data.objectives import build_objective, tokenize_pairs
from encdec.data.objectives.objective import token_budget_batches
from encdec.errors import ConfigError
from encdec.tokenizers import build_tokenizer
from encdec.training.loader import batch_stream

DIALOGSUM = "summarization/dialogsum/dialogsum.dev.jsonl.gz"


def objective(shared_data, budget=4096, batch_size=64, seed=0, **options):
    tokenizer = build_tokenizer("byte", num_sentinels=0)
    pairs = [p for _, p in zip(range(200), iter_jsonl_pairs(shared_data / DIALOGSUM))]
    data = tokenize_pairs(tokenizer, pairs)
    lengths = dict(max_source_len=256, max_target_len=64)
    return build_objective("seq2seq", data, tokenizer, batch_size, seed, batch_tokens=budget, **lengths, **options)


def test_every_batch_keeps_within_the_budget_and_every_example_comes_once(shared_data):
    seq2seq = objective(shared_data, budget=4096)
    batches = seq2seq.plan.batches(seq2seq.seed, 0)
    sizes = seq2seq.plan.sizes
    for batch in batches:
        assert len(batch) <= 64 and (len(batch) * sizes[batch].max(0).sum() <= 4096 or len(batch) == 1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(seq2seq.plan.num_examples))
    rows = [len(b) for b in batches]
    assert min(rows) < max(rows)  # short examples come many to a batch, long ones few
    for _ in range(3):  # the collated rows hold what the plan says, padded to the batch's longest
        batch = seq2seq.next_batch()
        padded = batch.src_ids.shape[1] + batch.labels.shape[1]
        assert batch.src_ids.shape[0] * padded <= 4096 or batch.src_ids.shape[0] == 1


def test_the_cut_is_greedy_and_an_oversized_example_stands_alone():
    lengths = np.array([3, 3, 3, 10, 2, 2, 2, 2])
    cut = token_budget_batches(np.arange(8), lengths, budget=9, most_rows=3)
    assert [b.tolist() for b in cut] == [[0, 1, 2], [3], [4, 5, 6], [7]]
    apart = np.array([[4, 1], [1, 4], [2, 2]])  # padded apart: 2 x (4 + 4) = 16 > 12, but (4 + 1) + ... fits alone
    assert [b.tolist() for b in token_budget_batches(np.arange(3), apart, budget=12, most_rows=8)] == [[0], [1, 2]]


def test_resuming_mid_epoch_gives_the_same_batches(shared_data):
    first = objective(shared_data, seed=3)
    straight = [first.next_batch() for _ in range(12)]
    resumed = objective(shared_data, seed=3)
    resumed.load_state_dict(json.loads(json.dumps({**first.state_dict(), "epoch": 0, "step": 5})))
    for expected in straight[5:]:
        got = resumed.next_batch()
        assert torch.equal(got.src_ids, expected.src_ids) and torch.equal(got.labels, expected.labels)


def test_refusals_are_one_sentence(shared_data):
    with pytest.raises(ConfigError, match="objective.pack fills rows instead: choose one"):
        objective(shared_data, pack=True)
    tokenizer = build_tokenizer("byte", num_sentinels=8)
    docs = tokenize_pairs(tokenizer, [("a b c d e f", "x")])[0]
    with pytest.raises(ConfigError, match="objective span_corruption has none"):
        build_objective("span_corruption", docs, tokenizer, 4, batch_tokens=100, seq_len=8)
    with pytest.raises(ConfigError, match="training.batch_tokens does not run under torchrun yet"):
        next(batch_stream(objective(shared_data), slice(0, 2), torch.device("cpu")))


def test_a_run_trains_with_a_token_budget(tmp_path, shared_data):
    config = {
        "model": {"preset": "t5-tiny"},
        "tokenizer": {"kind": "byte", "num_sentinels": 0},
        "data": {"format": "jsonl-pairs", "train": [str(shared_data / DIALOGSUM)], "max_documents": 120},
        "objective": {"kind": "seq2seq", "max_source_len": 128, "max_target_len": 32},
        "training": {"steps": 6, "batch_size": 32, "batch_tokens": 1200, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 6, "steps": 1},
        "output": {"plot": False},
    }
    path = tmp_path / "budget.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "eval" for r in records)
