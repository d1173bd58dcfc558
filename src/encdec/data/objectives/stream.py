"""An objective over a corpus read as a stream (data.streaming): a block of items at a time, never all of it.

    stream:  item 0, 1, 2, ...  (documents or pairs, read as needed; the corpus repeats pass after pass)
    block b: the b-th run of `block` items (a pass's last block may be shorter; blocks restart with each pass)
    batches: one epoch of the ordinary objective built over block b (tokenized, shuffled with its own seed)
    position (epoch, step) = (block b, batch within it)

Memory holds one block (and its tokens), whatever the corpus' size. A batch is a pure function of
its position as for every objective: block b is found again by reading the stream from its start
and skipping b blocks untokenized, so a resumed run (or a data worker) continues exactly where the
checkpoint says, after reading through the part of the pass before it once. Shuffling is within a
block: a corpus sorted by topic should be shuffled once on disk, or given a larger block.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from itertools import islice

from encdec.data.batch import Batch
from encdec.data.objectives.objective import Objective
from encdec.errors import DataError

BLOCK_SEED = 1_000_033  # block b's objective is seeded seed * BLOCK_SEED + b


def steps_per_epoch(objective: Objective) -> int:
    """The batches of one epoch of `objective`; random causal windows have no epoch: a block's tokens' worth."""
    windows = getattr(objective, "windows_per_epoch", None)
    if windows is not None:
        return max(1, -(-windows // objective.batch_size))
    steps, position = 0, (0, 0)
    while position[0] == 0:
        position = objective.position_after(*position)
        steps += 1
    return steps


class StreamObjective(Objective):
    def __init__(
        self,
        items: Callable[[], Iterator],
        make: Callable[[list, int], Objective],
        block: int,
        seed: int = 0,
        name: str = "stream",
        what: str = "the corpus",
    ):
        """`items()` opens the stream from its start; `make(items, seed)` builds the objective over a block."""
        super().__init__(seed)
        self.items, self.make, self.block, self.name, self.what = items, make, block, name, what
        self.blocks_per_pass: int | None = None  # known once a pass has been read to its end
        self._iterator: Iterator | None = None
        self._pid = os.getpid()  # a forked data worker opens the stream anew: a file's offset is shared
        self._next = 0  # the block of the pass the iterator reads next
        self._current: tuple[int, Objective, int] | None = None  # (block, its objective, its steps)

    def _take(self, keep: bool) -> tuple[list, int]:
        """The next block's items (kept or only counted) and their count; the end of the pass is noted."""
        taken = list(islice(self._iterator, self.block)) if keep else []
        count = len(taken) if keep else sum(1 for _ in islice(self._iterator, self.block))
        self._next += 1
        if count < self.block:
            self.blocks_per_pass = self._next if count else self._next - 1
            self._iterator = None
            if not self.blocks_per_pass:
                raise DataError(f"{self.what} holds no items to stream")
        return taken, count

    def _read(self, block: int) -> list:
        """The items of block `block` (counted over passes), the stream read or reopened as needed."""
        if self._pid != os.getpid():
            self._iterator, self._current, self._pid = None, None, os.getpid()
        while True:
            target = block % self.blocks_per_pass if self.blocks_per_pass else block
            if self._iterator is None or self._next > target:
                self._iterator, self._next = iter(self.items()), 0
            while self._next < target and self._iterator is not None:
                self._take(keep=False)
            if self._iterator is None:  # the pass ended before `target`: its length is known now
                continue
            items, count = self._take(keep=True)
            if count:
                return items

    def _block(self, block: int) -> tuple[Objective, int]:
        if self._current is None or self._current[0] != block:
            objective = self.make(self._read(block), self.seed * BLOCK_SEED + block)
            self._current = (block, objective, steps_per_epoch(objective))
        return self._current[1], self._current[2]

    def batch_at(self, epoch: int, step: int) -> Batch:
        return self._block(epoch)[0].batch_at(0, step)

    def position_after(self, epoch: int, step: int) -> tuple[int, int]:
        return (epoch + 1, 0) if step + 1 >= self._block(epoch)[1] else (epoch, step + 1)
