"""Causal language modelling over the token stream: random windows (yif-AI) or sequential packed windows.

The stream is the documents' flat token array (EOS between documents if the
shards were prepared with it; yif-AI used none). Each example is a window x of
T tokens and its next tokens y: `tgt_ids` = x (B, T), `labels` = y (B, T),
`src_*` None. The research encoder-decoders of SEEDS.md sections 3-4 take this
single stream too.

Shapes: B batch, T window length, N stream length.
"""

from __future__ import annotations

import numpy as np
import torch

from encdec.data.batch import Batch
from encdec.data.documents import Documents
from encdec.data.objectives.objective import Objective
from encdec.errors import ConfigError, DataError

WINDOW_MODES = ("random", "sequential")


class CausalLMObjective(Objective):
    """Random windows draw B uniform starts per step; sequential windows tile the stream with stride T."""

    name = "causal_lm"

    def __init__(self, documents: Documents, block_size: int, batch_size: int, mode: str = "random", seed: int = 0):
        super().__init__(seed)
        if mode not in WINDOW_MODES:
            raise ConfigError(f"causal LM window mode {mode!r} is unknown; choose one of {', '.join(WINDOW_MODES)}")
        if documents.num_tokens < block_size + 1:
            raise DataError(f"the corpus has {documents.num_tokens} tokens, fewer than one window of {block_size} + 1")
        self.tokens = documents.tokens
        self.block_size, self.batch_size, self.mode = block_size, batch_size, mode
        self.windows_per_epoch = (documents.num_tokens - 1) // block_size  # sequential mode

    def _starts(self, epoch: int, step: int) -> np.ndarray:
        """(B,) window starts of step `step`."""
        if self.mode == "random":
            return self.rng(epoch, step).integers(0, len(self.tokens) - self.block_size, size=self.batch_size)
        window = (step * self.batch_size + np.arange(self.batch_size)) % self.windows_per_epoch
        return window * self.block_size

    def batch_at(self, epoch: int, step: int) -> Batch:
        index = self._starts(epoch, step)[:, None] + np.arange(self.block_size + 1)  # (B, T + 1)
        window = torch.from_numpy(self.tokens[index].astype(np.int64))
        return Batch(tgt_ids=window[:, :-1], labels=window[:, 1:])  # (B, T) each

    def position_after(self, epoch: int, step: int) -> tuple[int, int]:
        step += 1
        if self.mode == "sequential" and step * self.batch_size >= self.windows_per_epoch * (epoch + 1):
            epoch += 1
        return epoch, step
