"""T5 span corruption: the random-span noise mask and the sentinel filling of inputs and targets.

`random_spans_noise_mask` follows T5's `random_spans_noise_mask`
(google-research/text-to-text-transfer-transformer, t5/data/preprocessors.py)
step for step, in numpy: round(length * density) noise tokens, clamped to
[1, length - 1]; round(noise / mean_span) spans, at least 1; noise and non-noise
tokens each cut into that many non-empty segments by a random partition; the
segments alternate starting with non-noise (so the mask always ends in noise).

`span_corrupt` replaces each noise span i in the input by sentinel i and writes
the target as "sentinel0 span0 sentinel1 span1 ..." (SEEDS.md section 2).

Shapes: L sequence length.
"""

from __future__ import annotations

import numpy as np

from encdec.errors import ConfigError


def _random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths of `num_segments` non-empty segments summing to `num_items`, all partitions equally likely."""
    first_in_segment = np.zeros(num_items, dtype=bool)
    first_in_segment[1:] = rng.permutation(np.arange(num_items - 1) < num_segments - 1)
    segment_id = np.cumsum(first_in_segment)  # (num_items,) from 0
    return np.bincount(segment_id, minlength=num_segments)


def random_spans_noise_mask(
    length: int, noise_density: float, mean_noise_span_length: float, rng: np.random.Generator
) -> np.ndarray:
    """(L,) bool mask, True at noise tokens, as T5 draws it."""
    if noise_density == 0.0:
        return np.zeros(length, dtype=bool)
    orig_length = length
    length = max(length, 2)  # avoid degeneracy, as T5 does
    num_noise_tokens = int(np.rint(length * noise_density))
    num_noise_tokens = min(max(num_noise_tokens, 1), length - 1)
    num_noise_spans = max(int(np.rint(num_noise_tokens / mean_noise_span_length)), 1)
    num_nonnoise_tokens = length - num_noise_tokens
    # T5 leaves this unguarded; with density near 1 there can be fewer non-noise tokens than spans.
    num_noise_spans = min(num_noise_spans, num_nonnoise_tokens)
    noise_span_lengths = _random_segmentation(num_noise_tokens, num_noise_spans, rng)
    nonnoise_span_lengths = _random_segmentation(num_nonnoise_tokens, num_noise_spans, rng)
    interleaved = np.stack([nonnoise_span_lengths, noise_span_lengths], axis=1).reshape(-1)  # (2 * spans,)
    span_starts = np.cumsum(interleaved)[:-1]
    span_start_indicator = np.zeros(length, dtype=np.int64)
    span_start_indicator[span_starts] = 1
    span_num = np.cumsum(span_start_indicator)
    return (span_num % 2 == 1)[:orig_length]


def span_corrupt(tokens: np.ndarray, noise_mask: np.ndarray, sentinel_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets): noise span i -> sentinel i in the inputs; targets = sentinel i + span i, in order.

    Raises ConfigError when the mask has more spans than there are sentinels.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    starts = noise_mask.copy()
    starts[1:] &= ~noise_mask[:-1]  # (L,) True at the first token of each noise span
    num_spans = int(starts.sum())
    if num_spans > len(sentinel_ids):
        raise ConfigError(
            f"the noise mask has {num_spans} spans but the tokenizer has only {len(sentinel_ids)} sentinels"
        )
    span_index = np.cumsum(starts) - 1  # (L,) index of the current span at noise tokens
    sentinels = np.asarray(sentinel_ids, dtype=np.int64)
    inputs = np.where(starts, sentinels[np.maximum(span_index, 0)], tokens)
    inputs = inputs[~noise_mask | starts]
    noise_tokens = tokens[noise_mask]
    insert_at = (np.cumsum(noise_mask) - 1)[starts]  # position of each span start among noise tokens
    targets = np.insert(noise_tokens, insert_at, sentinels[:num_spans])
    return inputs, targets
