"""A weighted mixture of objectives (data.mixture): each step's batch comes whole from one member, drawn by weight.

    step s  ->  member m = draw(seed, s) with probability weight_m / sum(weights)
            ->  m's own next batch: its start advanced once for every earlier step that drew m

fairseq's MultiCorpusSampledDataset samples a corpus per batch in the same way; seqio mixes per
example, which would need every member to share one batch layout and length. A batch per member
keeps each member's own objective, template and lengths, and its loss is that member's alone.

Like every objective, a batch is a pure function of its position (here the step alone): the draws
come CHUNK at a time from a generator seeded by (seed, chunk), and a member's position is found by
counting its earlier draws, so a resumed run draws and continues exactly as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from encdec.data.batch import Batch
from encdec.data.objectives.objective import Objective
from encdec.errors import ConfigError

MAX_MEMBERS = 64
CHUNK = 4096  # draws made at once


def proportional_weights(counts: Sequence[int], cap: int | None = None) -> list[float]:
    """T5's examples-proportional mixing: each member weighs its example count, capped at `cap` (T5's K)."""
    return [float(min(n, cap) if cap is not None else n) for n in counts]


class MixtureObjective(Objective):
    name = "mixture"

    def __init__(self, members: Sequence[Objective], weights: Sequence[float], seed: int = 0):
        super().__init__(seed)
        p = np.asarray(weights, dtype=np.float64)
        if len(members) != len(p) or not len(p) or (p < 0).any() or not p.sum() > 0:
            raise ConfigError(f"a mixture needs one non-negative weight per member and a positive sum, got {list(p)}")
        self.members, self.probabilities = list(members), p / p.sum()
        self._before = [np.zeros(len(p), dtype=np.int64)]  # draws of each member before chunk c, for c seen so far
        self._chunk: tuple[int, np.ndarray] | None = None
        self._cursors = [(0, m.position) for m in self.members]  # (batches taken, member position): a hint

    def _draws(self, chunk: int) -> np.ndarray:
        """The members drawn for the CHUNK steps of `chunk`."""
        if self._chunk is None or self._chunk[0] != chunk:
            rng = np.random.default_rng([self.seed, chunk, 104729])
            self._chunk = (chunk, rng.choice(len(self.members), size=CHUNK, p=self.probabilities))
        return self._chunk[1]

    def member_of(self, step: int) -> int:
        """The member whose batch step `step` trains on."""
        return int(self._draws(step // CHUNK)[step % CHUNK])

    def draws_before(self, step: int) -> np.ndarray:
        """(members,) how many of the steps before `step` drew each member."""
        chunk = step // CHUNK
        while len(self._before) <= chunk:
            c = len(self._before) - 1
            self._before.append(self._before[c] + np.bincount(self._draws(c), minlength=len(self.members)))
        return self._before[chunk] + np.bincount(self._draws(chunk)[: step % CHUNK], minlength=len(self.members))

    def _member_position(self, m: int, taken: int) -> tuple[int, int]:
        """Member m's position after `taken` of its batches (from its own start, the cursor moving on)."""
        done, position = self._cursors[m]
        if done > taken:
            done, position = 0, self.members[m].position
        while done < taken:
            position = self.members[m].position_after(*position)
            done += 1
        self._cursors[m] = (done, position)
        return position

    def batch_at(self, epoch: int, step: int) -> Batch:
        m = self.member_of(step)
        return self.members[m].batch_at(*self._member_position(m, int(self.draws_before(step)[m])))

    def position_after(self, epoch: int, step: int) -> tuple[int, int]:
        return epoch, step + 1
