"""What every objective shares: a per-step RNG derived from (seed, epoch, step) and a resumable position.

Deriving the generator from the position instead of carrying one along means
the whole state is two integers: `state_dict()` is JSON, and resuming at
(epoch, step) draws exactly what an uninterrupted run would have drawn. It also
makes each batch a pure function of its position, `batch_at(epoch, step)`, so
batches can be built ahead, in another process, in any order (training.loader).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from encdec.data.batch import Batch
from encdec.errors import ConfigError, DataError
from encdec.schema import Count, read


@dataclass
class DataPosition:
    """An objective's `state_dict`, as a checkpoint's state.json holds it."""

    objective: str
    seed: Count
    epoch: Count
    step: Count


class Objective:
    """Base of the objectives: iteration, `next_batch`, and the (epoch, step) state."""

    name = "objective"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.epoch = 0
        self.step = 0

    def rng(self, epoch: int, step: int, *extra: int) -> np.random.Generator:
        """A generator that depends only on the seed, the position (epoch, step) and `extra`."""
        return np.random.default_rng([self.seed, epoch, step, *extra])

    def batch_at(self, epoch: int, step: int) -> Batch:
        """The batch at position (epoch, step); reads nothing but the position, changes nothing."""
        raise NotImplementedError

    def position_after(self, epoch: int, step: int) -> tuple[int, int]:
        """The position that follows (epoch, step)."""
        raise NotImplementedError

    @property
    def position(self) -> tuple[int, int]:
        return self.epoch, self.step

    def advance(self) -> None:
        self.epoch, self.step = self.position_after(self.epoch, self.step)

    def next_batch(self) -> Batch:
        """The batch at the current position, then advance."""
        batch = self.batch_at(self.epoch, self.step)
        self.advance()
        return batch

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        return {"objective": self.name, "seed": self.seed, "epoch": self.epoch, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        try:
            position = read(DataPosition, state, "data.")
        except ConfigError as error:
            raise DataError(f"the data position is damaged: {error}") from None
        if position.objective != self.name or position.seed != self.seed:
            raise DataError(
                f"data state for {position.objective!r} seed {position.seed} does not match "
                f"objective {self.name!r} seed {self.seed}"
            )
        self.epoch, self.step = position.epoch, position.step


class EpochPlan:
    """Batches of example indices for one epoch, shuffled by (seed, epoch); optional length bucketing.

    With `lengths` given, each pool of `bucket_batches` batches is sorted by
    length before being cut into batches (less padding), and the batch order
    is then shuffled so lengths do not trend through the epoch. With `batch_tokens`
    (fairseq's --max-tokens) a batch holds as many of the sorted examples as keep
    rows x its longest example within that many tokens (at most `batch_size` rows; an
    example longer than the budget alone), so short examples come many to a batch.
    """

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        lengths: np.ndarray | None = None,
        bucket_batches: int = 50,
        batch_tokens: int | None = None,
        sizes: np.ndarray | None = None,
    ):
        """`sizes`: what a token budget counts per example (default: `lengths`), e.g. (N, 2) source and
        target lengths, which a batch pads apart."""
        if num_examples == 0:
            raise DataError("the objective has no examples to draw batches from")
        if batch_tokens is not None and lengths is None:
            raise ConfigError("a token budget needs the examples' lengths (seq2seq without pack)")
        self.num_examples, self.batch_size = num_examples, batch_size
        self.lengths, self.bucket_batches, self.batch_tokens = lengths, bucket_batches, batch_tokens
        self.sizes = sizes if sizes is not None else lengths
        self._cache: tuple[tuple[int, int], list[np.ndarray]] | None = None

    def batches(self, seed: int, epoch: int, shuffle: bool = True) -> list[np.ndarray]:
        if self._cache is not None and self._cache[0] == (seed, epoch):
            return self._cache[1]
        rng = np.random.default_rng([seed, epoch, 7919])
        order = rng.permutation(self.num_examples) if shuffle else np.arange(self.num_examples)
        if self.lengths is not None:
            pool = self.batch_size * self.bucket_batches
            order = np.concatenate(
                [
                    chunk[np.argsort(self.lengths[chunk], kind="stable")]
                    for chunk in np.array_split(order, max(1, -(-len(order) // pool)))
                ]
            )
        if self.batch_tokens is None:
            batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        else:
            batches = token_budget_batches(order, self.sizes, self.batch_tokens, self.batch_size)
        if self.lengths is not None and shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._cache = ((seed, epoch), batches)
        return batches


def token_budget_batches(order: np.ndarray, sizes: np.ndarray, budget: int, most_rows: int) -> list[np.ndarray]:
    """`order` cut into consecutive batches whose padded size, rows x the sum of each column's longest
    (`sizes` (N,) lengths, or (N, 2) source and target lengths, padded apart), stays within `budget` tokens,
    and whose rows stay within `most_rows`; an example longer than the budget makes a batch of its own."""
    sizes = sizes.reshape(len(sizes), -1)
    batches, start, longest = [], 0, np.zeros(sizes.shape[1], dtype=np.int64)
    for i, index in enumerate(order):
        widest = np.maximum(longest, sizes[index])
        rows = i - start + 1
        if i > start and (rows * int(widest.sum()) > budget or rows > most_rows):
            batches.append(order[start:i])
            start, widest = i, sizes[index].astype(np.int64)
        longest = widest
    if start < len(order):
        batches.append(order[start:])
    return batches
