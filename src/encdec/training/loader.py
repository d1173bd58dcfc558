"""Training batches built ahead of the loop, off the main thread, ready for a non-blocking copy.

    objective.batch_at(position)  ->  this process's rows  ->  token counts (host ints)  ->  pinned
    worker w of W builds positions w, w + W, ...; the DataLoader yields them in order

Each batch is a pure function of its position (data.objectives.objective), so workers
can build ahead in any process and the batches are exactly those of
`objective.next_batch()`. The loop's objective advances only as batches are
consumed, so a checkpoint records the next batch to train on, not how far the
workers ran ahead, and a resumed run continues bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from encdec.data.batch import IGNORE_INDEX, PACKING_FIELDS, Batch, padded_to_bucket
from encdec.data.objectives.objective import Objective
from encdec.errors import ConfigError
from encdec.sizing import capped_to_cores

ROW_FIELDS = ("tgt_ids", "labels", "src_ids", "src_mask", "prefix_lengths", *PACKING_FIELDS)


@dataclass
class LoadedBatch:
    """This process's rows of one global batch, in host memory, with its token counts."""

    batch: Batch
    num_tokens: int  # target tokens with loss in these rows
    global_tokens: int  # target tokens with loss in the whole global batch, over every process
    global_source_tokens: int = 0  # real source tokens in the whole global batch (0 where rows have no source mask)
    filled: int = 0  # encoder-decoder rows: source and target positions that hold a real token
    positions: int = 0  # encoder-decoder rows: every source and target position computed, padding included

    def pin_memory(self) -> LoadedBatch:  # called by the DataLoader's pinning thread
        fields = {f: getattr(self.batch, f).pin_memory() for f in ROW_FIELDS if getattr(self.batch, f) is not None}
        return replace(self, batch=replace(self.batch, **fields))

    def to(self, device: torch.device) -> Batch:
        """The rows on `device`; the copy does not wait when the memory is pinned."""
        return self.batch.to(device, non_blocking=True)


def forward(model: nn.Module, batch: Batch):
    """The model's output on a batch on its device, as training and evaluation (and a distillation teacher,
    which so reads exactly the student's inputs) call it."""
    return model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, **batch.packing)


def local_rows(batch: Batch, rows: slice | None) -> LoadedBatch:
    """Cut this process's `rows` from a global batch and count the loss tokens of both, and the global batch's
    source tokens, on the host."""
    global_tokens = int((batch.labels != IGNORE_INDEX).sum())
    sources = int(batch.src_mask.sum()) if batch.src_mask is not None else 0
    if rows is None:
        return LoadedBatch(batch, global_tokens, global_tokens, sources, *fill(batch))
    if batch.src_segments is not None:
        refuse_packing_across_processes()
    local = replace(batch, **{f: getattr(batch, f)[rows] for f in ROW_FIELDS if getattr(batch, f) is not None})
    return LoadedBatch(local, int((local.labels != IGNORE_INDEX).sum()), global_tokens, sources, *fill(local))


def fill(batch: Batch) -> tuple[int, int]:
    """(real tokens, positions) over the source and target of encoder-decoder rows; (0, 0) for the others,
    whose padding has no mask to count it by. Packing raises the first towards the second."""
    if batch.src_mask is None:
        return 0, 0
    real = int(batch.src_mask.sum()) + int((batch.labels != IGNORE_INDEX).sum())
    return real, batch.src_mask.numel() + batch.labels.numel()


def refuse_packing_across_processes() -> None:
    """A packed step has as many rows as its examples need, not batch_size: there are no fixed rows to split."""
    raise ConfigError(
        "objective.pack does not run under torchrun yet (a packed step's row count varies); "
        "run on one process or without pack"
    )


class _Positions(IterableDataset):
    """The batches from `start` on (each through `bucket`, where given); under W workers, worker w builds every
    W-th one."""

    def __init__(
        self, objective: Objective, start: tuple[int, int], rows: slice | None, bucket: Callable[[Batch], Batch] | None
    ):
        self.objective, self.start, self.rows, self.bucket = objective, start, rows, bucket

    def __iter__(self) -> Iterator[LoadedBatch]:
        worker = get_worker_info()
        n_workers, index = (worker.num_workers, worker.id) if worker else (1, 0)
        position = self.start
        for _ in range(index):
            position = self.objective.position_after(*position)
        while True:
            batch = self.objective.batch_at(*position)
            yield local_rows(batch if self.bucket is None else self.bucket(batch), self.rows)
            for _ in range(n_workers):
                position = self.objective.position_after(*position)


def default_workers(device: torch.device) -> int:
    """Worker processes when training.data_workers is unset: 2 beside a GPU (if cores allow), none on a CPU,
    whose cores are the ones computing the step."""
    if device.type == "cpu":
        return 0
    return max(0, min(2, (os.cpu_count() or 1) - 1))


def bucket_padding(multiple: int | None, rows: int, pad_id: int) -> Callable[[Batch], Batch] | None:
    """training.bucket_length's padding of each batch (lengths to a multiple of it, `rows` rows), or None without."""
    return partial(padded_to_bucket, multiple=multiple, rows=rows, pad_id=pad_id) if multiple else None


def batch_stream(
    objective: Objective,
    rows: slice | None,
    device: torch.device,
    workers: int | None = None,
    bucket: Callable[[Batch], Batch] | None = None,
) -> Iterator[LoadedBatch]:
    """Batches from the objective's current position on, each advancing the objective once taken, and padded by
    `bucket` (training.bucket_length: data.batch.padded_to_bucket) where given; `workers` (training.data_workers)
    above the machine's cores is capped at them, with a warning."""
    if rows is not None and getattr(objective, "pack", False):
        refuse_packing_across_processes()  # here, before any worker starts, so the refusal is one sentence
    members = getattr(objective, "members", [objective])  # a mixture's, or the objective itself
    if rows is not None and any(getattr(m, "batch_tokens", None) is not None for m in members):
        raise ConfigError(
            "training.batch_tokens does not run under torchrun yet (a step's row count varies with the budget); "
            "run on one process or set training.batch_size alone"
        )
    workers = default_workers(device) if workers is None else capped_to_cores(workers, "training.data_workers")
    loader = DataLoader(
        _Positions(objective, objective.position, rows, bucket),
        batch_size=None,  # the objectives batch for themselves
        num_workers=workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if workers else None,
        persistent_workers=workers > 0,
        generator=torch.Generator(),  # its seed draw would otherwise advance the global RNG that dropout uses
    )
    for loaded in loader:
        objective.advance()
        yield loaded
