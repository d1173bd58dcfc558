"""Batches built ahead, in worker processes, are exactly the objective's batches, in order, and resume exactly."""

import pytest
import torch

from encdec.data.batch import IGNORE_INDEX
from encdec.errors import ConfigError
from encdec.training import load_config, train
from encdec.training.loader import batch_stream, local_rows
from encdec.training.metrics import read_metrics
from encdec.training.run_data import build_run_data


@pytest.fixture
def objective(tiny_config, tmp_path):
    return build_run_data(load_config(tiny_config), tmp_path).train


def same(a, b) -> bool:
    fields = ("tgt_ids", "labels", "src_ids", "src_mask")
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in fields)


def test_batch_at_is_pure_and_next_batch_walks_it(objective):
    positions = []
    per_epoch = len(objective.plan.batches(objective.seed, 0))
    for _ in range(per_epoch + 3):  # through an epoch boundary
        positions.append(objective.position)
        objective.next_batch()
    assert positions[-1][0] >= 1, "the walk should cross an epoch"
    first = objective.batch_at(*positions[3])
    assert objective.position == objective.position_after(*positions[-1])  # batch_at moved nothing
    assert same(first, objective.batch_at(*positions[3]))
    rewound = type(objective).__new__(type(objective))
    rewound.__dict__.update(objective.__dict__)
    rewound.epoch, rewound.step = positions[-2]
    assert same(rewound.next_batch(), objective.batch_at(*positions[-2]))


@pytest.mark.parametrize("workers", [0, 2])
def test_the_stream_yields_next_batch_in_order_and_advances_only_as_consumed(tiny_config, tmp_path, workers):
    straight = build_run_data(load_config(tiny_config), tmp_path).train
    streamed = build_run_data(load_config(tiny_config), tmp_path).train
    stream = batch_stream(streamed, None, torch.device("cpu"), workers)
    for step in range(30):
        loaded = next(stream)
        assert same(loaded.batch, straight.next_batch()), step
        assert streamed.position == straight.position  # the checkpointed position: the next batch to train on
        assert loaded.num_tokens == loaded.global_tokens == int((loaded.batch.labels != IGNORE_INDEX).sum())


def test_a_process_keeps_its_rows_and_counts_both_its_tokens_and_the_global_batch(objective):
    batch = objective.next_batch()
    halves = [local_rows(batch, slice(0, 2)), local_rows(batch, slice(2, 4))]
    assert [h.batch.batch_size for h in halves] == [2, 2]
    assert sum(h.num_tokens for h in halves) == halves[0].global_tokens == halves[1].global_tokens
    assert torch.equal(torch.cat([h.batch.src_ids for h in halves]), batch.src_ids)


def losses(run):
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


def test_training_with_worker_processes_equals_the_main_thread_and_resumes_bitwise(tmp_path, tiny_config):
    base = ["training.steps=8", "output.save_interval=4", "schedule.kind=constant"]  # the same lr when cut at 4
    train(load_config(tiny_config, [*base, "training.data_workers=0"]), tmp_path / "main")
    train(load_config(tiny_config, [*base, "training.data_workers=2", "training.steps=4"]), tmp_path / "workers")
    train(load_config(tiny_config, [*base, "training.data_workers=2"]), tmp_path / "workers", resume=True)
    assert losses(tmp_path / "workers") == losses(tmp_path / "main")  # bitwise, across the resume


def test_each_train_record_carries_cumulative_tokens_and_elapsed_time(tmp_path, tiny_config):
    train(load_config(tiny_config, ["training.steps=6", "output.log_interval=3"]), tmp_path / "run")
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    tokens = [r["tokens"] for r in records]
    assert all(b > a for a, b in zip(tokens, tokens[1:])) and all(r["tokens_per_s"] > 0 for r in records)
    elapsed = [r["elapsed"] for r in records]
    assert all(b > a for a, b in zip(elapsed, elapsed[1:]))


def test_negative_data_workers_are_refused(tiny_config):
    with pytest.raises(ConfigError, match="training.data_workers must be zero or more, got -1"):
        load_config(tiny_config, ["training.data_workers=-1"])


def test_packed_batches_stream_through_workers_whole_but_are_not_split_across_processes(tiny_config, tmp_path):
    config = load_config(tiny_config, ["objective.pack=true", "objective.seq_len=512"])
    straight = build_run_data(config, tmp_path).train
    stream = batch_stream(build_run_data(config, tmp_path).train, None, torch.device("cpu"), 2)
    for _ in range(3):
        loaded, expected = next(stream), straight.next_batch()
        assert same(loaded.batch, expected) and torch.equal(loaded.batch.tgt_segments, expected.tgt_segments)
        assert 0 < loaded.filled < loaded.positions
    with pytest.raises(ConfigError, match="objective.pack does not run under torchrun"):
        next(batch_stream(straight, slice(0, 2), torch.device("cpu"), 2))
