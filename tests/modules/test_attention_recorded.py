"""`Attention.recorded`: each call's probabilities are the reference softmax of its scores (MHA, GQA, MQA,
with and without scaling, masks, causality, a filled cross-attention cache), and the output is unchanged."""

import pytest
import torch
from attention_kit import reference_probs

from encdec.modules import Attention, AttentionInputs, DecodeState, StaticKVCache, additive_mask


@pytest.mark.parametrize("n_kv_heads", [6, 3, 1])
@pytest.mark.parametrize("scale", [True, False])
def test_recorded_probabilities_are_the_reference_softmax_and_the_output_is_unchanged(n_kv_heads, scale):
    attn = Attention(d_model=24, n_heads=6, n_kv_heads=n_kv_heads, d_head=5, scale=scale).eval()
    x, source = torch.randn(2, 7, 24), torch.randn(2, 9, 24)
    mask = additive_mask(torch.rand(2, 1, 7, 9) > 0.3, torch.randn(1, 6, 7, 9), torch.float32)
    with torch.no_grad():
        plain = attn(x, source, AttentionInputs(mask=mask))
        attn.recorded = []
        recorded_out = attn(x, source, AttentionInputs(mask=mask))
        expected = reference_probs(attn, x, source, mask, scale)
    (probs,) = attn.recorded
    assert torch.equal(plain, recorded_out)
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=1e-5)


def test_causal_self_attention_records_zeros_above_the_diagonal():
    attn = Attention(d_model=16, n_heads=4, n_kv_heads=2).eval()
    x = torch.randn(1, 6, 16)
    attn.recorded = []
    with torch.no_grad():
        attn(x, None, AttentionInputs(is_causal=True))
        expected = reference_probs(attn, x, x, causal=True)
    (probs,) = attn.recorded
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=1e-5)
    assert probs[0, :, torch.ones(6, 6, dtype=torch.bool).triu(1)].abs().max() == 0


@pytest.mark.parametrize("transposed", [False, True])
def test_a_decoding_step_records_against_its_cached_keys(transposed):
    """A step over a filled cross-attention cache (read transposed on the CPU) and a growing self cache."""
    cross = Attention(d_model=16, n_heads=4, n_kv_heads=2).eval()
    x, memory = torch.randn(1, 1, 16), torch.randn(1, 5, 16)
    cache = StaticKVCache(transposed)
    with torch.no_grad():
        cache.append(*cross.project_kv(memory))
        cross.recorded = []
        cross(x, memory, cache=cache)
        expected = reference_probs(cross, x, memory)
    torch.testing.assert_close(cross.recorded[0], expected, atol=1e-6, rtol=1e-5)
    own = Attention(d_model=16, n_heads=2).eval()
    state = DecodeState(1, 8, "cpu", torch.float32)
    growing = state.new_caches(1)[0]
    with torch.no_grad():
        own(torch.randn(1, 3, 16), None, AttentionInputs(is_causal=True), growing)
        state.advance(3)
        own.recorded = []
        own(torch.randn(1, 1, 16), cache=growing)
    assert own.recorded[0].shape == (1, 2, 1, 4)
    torch.testing.assert_close(own.recorded[0].sum(-1), torch.ones(1, 2, 1))


def test_a_boolean_mask_is_recorded_as_blocking():
    attn = Attention(d_model=16, n_heads=2).eval()
    x, source = torch.randn(1, 3, 16), torch.randn(1, 4, 16)
    allowed = torch.tensor([True, True, False, True])[None, None, None, :]
    attn.recorded = []
    with torch.no_grad():
        attn(x, source, AttentionInputs(mask=allowed))
    assert attn.recorded[0][..., 2].abs().max() == 0
