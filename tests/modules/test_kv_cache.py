import pytest
import torch

from encdec.modules import DecoderCache, KVCache, StaticKVCache


def test_growing_cache_returns_everything_appended_and_grows_past_its_buffer():
    cache = KVCache(max_len=2)
    k = torch.randn(2, 3, 5, 4)
    for t in range(5):
        keys, values = cache.append(k[:, :, t : t + 1], -k[:, :, t : t + 1])
    torch.testing.assert_close(keys, k)
    torch.testing.assert_close(values, -k)
    assert cache.length == 5


def test_reorder_selects_batch_rows():
    cache = KVCache(max_len=4)
    k = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 2, 1).contiguous()
    cache.append(k, k)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.keys[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_static_cache_is_frozen_once_filled():
    cache = StaticKVCache()
    assert not cache.frozen
    cache.append(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    assert cache.frozen and cache.length == 3


@pytest.mark.parametrize("device, transposed", [("cpu", True), ("meta", False)])
def test_a_static_cache_transposes_its_keys_on_the_cpu_only(device, transposed):
    """Beams' cross-attention keys are stored (B, K, D, S) for the CPU's few-query product; elsewhere SDPA
    reads them, and they stay (B, K, S, D). Either way `keys` is the same (B, K, S, D) tensor."""
    cache = StaticKVCache(transposed=True)
    k = torch.arange(24.0).view(1, 2, 3, 4).to(device)
    cache.append(k, k)
    assert cache.transposed is transposed and cache.stored_keys.is_contiguous()
    assert cache.stored_keys.shape == ((1, 2, 4, 3) if transposed else (1, 2, 3, 4))
    assert cache.keys.shape == (1, 2, 3, 4) and cache.keys_t.shape == (1, 2, 4, 3)
    if device == "cpu":
        assert torch.equal(cache.keys, k)


def test_decoder_cache_offset_counts_decoded_positions():
    cache = DecoderCache(n_layers=2, max_len=8)
    assert cache.offset == 0
    cache.layers[0].self_attn.append(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    assert cache.offset == 3


def test_reorder_in_place_handles_rows_that_swap_and_repeat():
    cache = KVCache(max_len=8)
    k = torch.arange(4.0).view(4, 1, 1, 1).expand(4, 1, 3, 2).contiguous()
    cache.append(k, -k)
    cache.reorder(torch.tensor([1, 0, 0, 3]))  # rows 0 and 1 swap, row 2 copies row 0, row 3 stays
    assert cache.keys[:, 0, :3, 0].tolist() == [[1.0] * 3, [0.0] * 3, [0.0] * 3, [3.0] * 3]
    assert torch.equal(cache.values[:, :, :3], -cache.keys[:, :, :3])


def test_reorders_alternate_between_two_buffers_and_keep_appending_right():
    """Beam reorders gather into a spare buffer and swap: after the first, no allocation, and the cache
    still holds exactly the chosen rows followed by what is appended next."""
    cache = KVCache(max_len=8)
    k = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 2, 2, 4).contiguous()
    cache.append(k, -k)
    cache.reorder(torch.tensor([2, 0, 0]))
    cache.reorder(torch.tensor([1, 0, 2]))  # rows now hold 0, 2, 0
    buffers = {cache.keys.data_ptr()}
    cache.reorder(torch.tensor([0, 1, 2]))
    buffers.add(cache.keys.data_ptr())
    cache.reorder(torch.tensor([0, 1, 2]))
    assert cache.keys.data_ptr() in buffers and len(buffers) == 2
    keys, values = cache.append(torch.full((3, 2, 1, 4), 9.0), torch.full((3, 2, 1, 4), -9.0))
    assert keys[:, 0, :, 0].tolist() == [[0.0, 0.0, 9.0], [2.0, 2.0, 9.0], [0.0, 0.0, 9.0]]
    assert torch.equal(values, -keys)
