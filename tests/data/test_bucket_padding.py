"""training.bucket_length's padding (data.batch.padded_to_bucket): lengths up to a multiple, rows up to the
batch size, the batch as built in the corner, padding masked out, unlabelled and of segment 0."""

import numpy as np
import torch

from encdec.data.batch import IGNORE_INDEX, PACKING_FIELDS, collate_encoder_decoder, padded_to_bucket
from encdec.data.objectives.collate import collate_prefix_lm
from encdec.data.objectives.packing import collate_packed

PAD = 0
EXAMPLES = [(np.arange(3, 3 + n), np.arange(5, 5 + m)) for n, m in ((7, 4), (2, 9), (5, 1))]


def assert_padded(built, padded, multiple: int, rows: int) -> None:
    pads = {"tgt_ids": PAD, "labels": IGNORE_INDEX, "src_ids": PAD, "src_mask": False, "prefix_lengths": 0}
    for name, value in {**pads, **dict.fromkeys(PACKING_FIELDS, 0)}.items():
        before, after = getattr(built, name), getattr(padded, name)
        if before is None:
            assert after is None
            continue
        assert after.shape[0] == rows and all(n % multiple == 0 for n in after.shape[1:]), name
        corner = tuple(slice(0, n) for n in before.shape)
        assert torch.equal(after[corner], before), name  # the batch as built
        rest = torch.ones_like(after, dtype=torch.bool)
        rest[corner] = False
        assert (after[rest] == value).all(), name  # and padding around it


def test_a_batch_is_padded_to_its_bucket_and_keeps_its_own_values():
    built = collate_encoder_decoder(EXAMPLES, PAD, decoder_start_id=1)  # (3, 7) and (3, 9)
    assert_padded(built, padded_to_bucket(built, multiple=8, rows=4, pad_id=PAD), multiple=8, rows=4)


def test_a_packed_and_a_prefix_lm_batch_are_padded_alike():
    packed = collate_packed(EXAMPLES, PAD, 1, max_source_len=12, max_target_len=12)
    assert_padded(packed, padded_to_bucket(packed, multiple=16, rows=4, pad_id=PAD), multiple=16, rows=4)
    prefix = collate_prefix_lm(EXAMPLES, PAD)
    assert_padded(prefix, padded_to_bucket(prefix, multiple=5, rows=3, pad_id=PAD), multiple=5, rows=3)


def test_lengths_already_on_a_multiple_and_rows_beyond_the_size_are_left_as_they_are():
    built = collate_encoder_decoder(EXAMPLES, PAD, decoder_start_id=1)
    padded = padded_to_bucket(built, multiple=1, rows=2, pad_id=PAD)
    assert all(torch.equal(getattr(padded, f), getattr(built, f)) for f in ("src_ids", "src_mask", "tgt_ids", "labels"))
