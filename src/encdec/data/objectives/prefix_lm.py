"""The prefix-LM objective for decoder-only models: UL2's S denoiser alone, in the prefix-LM batch layout.

Each document chunk is split as S splits it (the first max(len // 2, 2) tokens
are the prefix, the rest the target); `collate.collate_prefix_lm` describes the
batch: labels -100 over the prefix, `prefix_lengths` for a bidirectional prefix.
"""

from __future__ import annotations

from encdec.data.documents import Documents
from encdec.data.objectives.ul2 import UL2Config, UL2Objective


def prefix_lm_objective(
    documents: Documents, batch_size: int, pad_id: int, eos_id: int, max_length: int = 512, seed: int = 0
) -> UL2Objective:
    """Decoder-only prefix LM on documents: each chunk split as UL2's S denoiser does (first half -> rest)."""
    config = UL2Config(r_prob=0.0, x_prob=0.0, s_prob=1.0, max_length=max_length)
    return UL2Objective(
        documents,
        batch_size,
        pad_id=pad_id,
        eos_id=eos_id,
        decoder_start_id=pad_id,
        sentinel_ids=[],
        config=config,
        batch_format="prefix_lm",
        seed=seed,
    )
