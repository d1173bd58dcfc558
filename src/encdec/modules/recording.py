"""Recording attention probabilities: while a `recording(modules)` block runs, each Attention module appends the
probabilities of every call to its own list (Attention.recorded), from the very q, k, mask and scale it attends
with. inspection.record draws a model's maps from them, transcription.word_times its tokens' times."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from encdec.modules.attention import Attention


@contextmanager
def recording(modules: Sequence[Attention]) -> Iterator[list[list[torch.Tensor]]]:
    """Inside the block each module appends its probabilities (B, H, T, S) to its own list (one per module, in
    order); afterwards none records, also when the block raises."""
    records = [[] for _ in modules]
    for module, record in zip(modules, records, strict=True):
        module.recorded = record
    try:
        yield records
    finally:
        for module in modules:
            module.recorded = None
