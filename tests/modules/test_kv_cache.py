import pytest
import torch

from encdec.modules import StaticKVCache


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
