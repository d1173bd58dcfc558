import math

import pytest
import torch

from encdec.modules import RelativePositionBias, RotaryEmbedding, relative_position_bucket, sinusoidal_table


def test_sinusoidal_table_follows_vaswani_formula():
    table = sinusoidal_table(50, 16)
    pos, i = 37, 3
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (16, 64)])
def test_t5_buckets_equal_hugging_face(bidirectional, num_buckets, max_distance):
    hf_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    relative = torch.arange(-300, 301)[None, :]
    expected = hf_t5.T5Attention._relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    assert torch.equal(relative_position_bucket(relative, bidirectional, num_buckets, max_distance), expected)


def test_unidirectional_bias_puts_every_future_key_in_bucket_zero():
    bias = RelativePositionBias(n_heads=2, bidirectional=False, num_buckets=8, max_distance=20)
    out = bias(torch.arange(4), torch.arange(10))  # (1, H, 4, 10)
    assert out.shape == (1, 2, 4, 10)
    assert torch.equal(out[0, :, 0, 1], out[0, :, 0, 9])  # keys after the query share bucket 0
    assert torch.equal(out[0, :, 0, 0], out[0, :, 3, 3])  # distance 0 anywhere


def rope_scores(rope, q_positions, k_positions, q, k):
    return rope(q, q_positions) @ rope(k, k_positions).transpose(-1, -2)  # (1, 1, T, S)


def test_rope_scores_depend_only_on_i_minus_j():
    rope = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    for shift in (0, 5, 113):
        scores = rope_scores(rope, torch.tensor([7 + shift]), torch.arange(20) + shift, q, k)
        base = rope_scores(rope, torch.tensor([7]), torch.arange(20), q, k)
        torch.testing.assert_close(scores, base, atol=1e-4, rtol=1e-4)


def test_rope_uses_rotate_half_pairing():
    rope = RotaryEmbedding(4, theta=10000.0)
    x = torch.tensor([[[[1.0, 0.0, 0.0, 0.0]]]])
    out = rope(x, torch.tensor([1]))  # dimension 0 turns with dimension 2 by angle 1 rad
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([math.cos(1.0), 0.0, math.sin(1.0), 0.0]))


def test_rope_accepts_per_example_positions():
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 3, 5, 8)
    positions = torch.stack([torch.arange(5), torch.arange(5) + 9])  # (B, T)
    torch.testing.assert_close(rope(x, positions)[1], rope(x[1:], torch.arange(5) + 9)[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_rope_frequencies_stay_fp32_through_dtype_casts(dtype):
    rope = RotaryEmbedding(16)
    fresh = rope.inv_freq.clone()
    rope.to(dtype)
    assert rope.inv_freq.dtype == torch.float32 and torch.equal(rope.inv_freq, fresh)


def test_rope_frequencies_follow_device_moves_and_are_rebuilt_by_to_empty():
    rope = RotaryEmbedding(16)
    fresh = rope.inv_freq.clone()
    rope.to("meta")
    assert rope.inv_freq.device.type == "meta"
    rope.to_empty(device="cpu")  # the meta-device init path: the table comes back with its values
    assert rope.inv_freq.device.type == "cpu" and torch.equal(rope.inv_freq, fresh)


def test_rope_keeps_the_input_dtype_and_state_dict_has_no_table():
    rope = RotaryEmbedding(8).to(torch.bfloat16)
    x = torch.randn(1, 2, 3, 8, dtype=torch.bfloat16)
    assert rope(x, torch.arange(3)).dtype == torch.bfloat16
    assert "inv_freq" not in rope.state_dict()
