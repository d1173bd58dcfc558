import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from objective_helpers import rebuild_from_corruption

from encdec.data.objectives.span_corruption import random_spans_noise_mask, span_corrupt
from encdec.data.objectives.ul2 import UL2Config, denoise, s_split

SENTINELS = np.arange(50_000, 50_600)  # far above any token drawn below


@st.composite
def masked_sequences(draw):
    length = draw(st.integers(min_value=1, max_value=600))
    density = draw(st.sampled_from([0.15, 0.3, 0.5, 0.8]))
    mean_span = draw(st.sampled_from([1.0, 3.0, 8.0, 32.0]))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 32_000, size=length)
    return tokens, random_spans_noise_mask(length, density, mean_span, rng)


@settings(max_examples=300, deadline=None)
@given(masked_sequences())
def test_inputs_and_targets_rebuild_the_original_sequence_exactly(sequence):
    tokens, mask = sequence
    inputs, targets = span_corrupt(tokens, mask, SENTINELS)
    np.testing.assert_array_equal(rebuild_from_corruption(inputs, targets, SENTINELS), tokens)
    assert len(inputs) + len(targets) == len(tokens) + 2 * int((mask[1:] & ~mask[:-1]).sum() + mask[0])


@settings(max_examples=300, deadline=None)
@given(masked_sequences())
def test_sentinels_are_ordered_and_unique_and_match_between_sides(sequence):
    tokens, mask = sequence
    inputs, targets = span_corrupt(tokens, mask, SENTINELS)
    in_sentinels = inputs[inputs >= SENTINELS[0]]
    out_sentinels = targets[targets >= SENTINELS[0]]
    np.testing.assert_array_equal(in_sentinels, SENTINELS[: len(in_sentinels)])
    np.testing.assert_array_equal(out_sentinels, in_sentinels)
    assert len(tokens) == 1 or targets[0] == SENTINELS[0]


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 1000), st.floats(0.05, 0.95), st.floats(1.0, 64.0), st.integers(0, 2**31))
def test_mask_starts_clean_ends_noisy_and_has_the_rounded_noise_count(length, density, mean_span, seed):
    mask = random_spans_noise_mask(length, density, mean_span, np.random.default_rng(seed))
    expected = min(max(int(np.rint(length * density)), 1), length - 1)
    assert mask.sum() == expected
    assert not mask[0] and mask[-1]


def test_noise_fraction_and_mean_span_length_match_the_settings_over_many_draws():
    # T5 rounds the span count, so short sequences shift the mean span (512 tokens at (0.2, 64) give 2 spans
    # of mean 51); over 4,096 tokens the rounding costs under 2%.
    rng = np.random.default_rng(0)
    for density, mean_span in [(0.15, 3.0), (0.5, 32.0), (0.2, 64.0)]:
        noise, spans = 0, 0
        for _ in range(100):
            mask = random_spans_noise_mask(4096, density, mean_span, rng)
            noise += mask.sum()
            spans += mask[0] + (mask[1:] & ~mask[:-1]).sum()
        assert abs(noise / (100 * 4096) - density) < 0.005
        assert abs(noise / spans - mean_span) / mean_span < 0.05


def test_x_denoiser_masks_the_union_of_its_two_masks():
    config = UL2Config()
    tokens = np.arange(512)
    inputs, targets = denoise(tokens, "X", config, SENTINELS, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    union = random_spans_noise_mask(512, 0.5, 32.0, rng) | random_spans_noise_mask(512, 0.2, 64.0, rng)
    assert (targets < SENTINELS[0]).sum() == union.sum()
    assert union.sum() > 0.5 * 512  # the union is denser than either mask
    np.testing.assert_array_equal(rebuild_from_corruption(inputs, targets, SENTINELS), tokens)


@given(st.integers(2, 2000))
def test_s_denoiser_splits_at_half_the_length_but_at_least_two(length):
    tokens = np.arange(length)
    inputs, targets = denoise(tokens, "S", UL2Config(), SENTINELS, np.random.default_rng(0))
    assert len(inputs) == max(length // 2, 2) == s_split(length)
    np.testing.assert_array_equal(np.concatenate([inputs, targets]), tokens)
