import pytest
import torch
from attention_kit import reference_attention

from encdec.modules import Attention, AttentionInputs, DecodeState, RotaryEmbedding, additive_mask, causal_mask


@pytest.mark.parametrize("n_kv_heads", [6, 3, 2, 1])
@pytest.mark.parametrize("scale", [True, False])
def test_attention_equals_reference_softmax_for_mha_gqa_and_mqa(n_kv_heads, scale):
    attn = Attention(d_model=24, n_heads=6, n_kv_heads=n_kv_heads, d_head=5, scale=scale).eval()
    x, source = torch.randn(2, 7, 24), torch.randn(2, 9, 24)
    mask = additive_mask(torch.rand(2, 1, 7, 9) > 0.3, torch.randn(1, 6, 7, 9), torch.float32)
    expected = reference_attention(attn, x, source, mask, scale)
    torch.testing.assert_close(attn(x, source, AttentionInputs(mask=mask)), expected, atol=1e-5, rtol=1e-5)


def test_gqa_equals_mha_whose_kv_heads_are_repeated():
    gqa = Attention(d_model=32, n_heads=8, n_kv_heads=2).eval()
    mha = Attention(d_model=32, n_heads=8, n_kv_heads=8).eval()
    with torch.no_grad():
        mha.q.weight.copy_(gqa.q.weight)
        mha.o.weight.copy_(gqa.o.weight)
        for name in ("k", "v"):  # each KV head serves 4 consecutive query heads
            w = getattr(gqa, name).weight.view(2, 4, 32).repeat_interleave(4, dim=0)
            getattr(mha, name).weight.copy_(w.reshape(32, 32))
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(
        gqa(x, None, AttentionInputs(is_causal=True)),
        mha(x, None, AttentionInputs(is_causal=True)),
        atol=1e-6,
        rtol=1e-5,
    )


def test_gqa_with_kv_heads_equal_heads_is_mha():
    attn = Attention(d_model=32, n_heads=4, n_kv_heads=4).eval()
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(attn(x), reference_attention(attn, x, x), atol=1e-5, rtol=1e-5)


def test_perturbing_a_future_token_changes_no_earlier_output_in_causal_self_attention():
    attn = Attention(d_model=16, n_heads=2).eval()
    x = torch.randn(1, 8, 16)
    y = x.clone()
    y[:, 5] += 1.0
    a, b = attn(x, None, AttentionInputs(is_causal=True)), attn(y, None, AttentionInputs(is_causal=True))
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_causal_cross_attention_sees_only_source_positions_up_to_its_own():
    attn = Attention(d_model=16, n_heads=2, n_kv_heads=1).eval()
    x, source = torch.randn(1, 8, 16), torch.randn(1, 8, 16)
    mask = additive_mask(causal_mask(8, 8), None, torch.float32)
    changed = source.clone()
    changed[:, 4] += 1.0
    a, b = attn(x, source, AttentionInputs(mask=mask)), attn(x, changed, AttentionInputs(mask=mask))
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_padding_keys_do_not_change_outputs():
    attn = Attention(d_model=16, n_heads=4).eval()
    x = torch.randn(1, 3, 16)
    source = torch.randn(1, 5, 16)
    padded = torch.cat([source, torch.randn(1, 4, 16)], dim=1)
    allowed = torch.tensor([[True] * 5 + [False] * 4])[:, None, None, :]
    mask = additive_mask(allowed, None, torch.float32)
    torch.testing.assert_close(attn(x, padded, AttentionInputs(mask=mask)), attn(x, source), atol=1e-6, rtol=1e-5)


def test_a_fully_masked_row_gives_finite_output():
    attn = Attention(d_model=8, n_heads=2).eval()
    mask = additive_mask(torch.zeros(1, 1, 1, 4, dtype=torch.bool), None, torch.float32)
    assert torch.isfinite(attn(torch.randn(1, 2, 8), torch.randn(1, 4, 8), AttentionInputs(mask=mask))).all()


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_growing_self_attention_cache_equals_full_causal_attention_with_rope(n_kv_heads):
    rope = RotaryEmbedding(8)
    attn = Attention(d_model=32, n_heads=4, n_kv_heads=n_kv_heads, rotary=rope).eval()
    x = torch.randn(2, 10, 32)
    pos = torch.arange(10)
    full = attn(x, None, AttentionInputs(is_causal=True, q_pos=pos, k_pos=pos))
    state = DecodeState(2, 4, "cpu", torch.float32)  # room for 4 positions: outgrown on purpose
    cache = state.new_caches(1)[0]
    steps = []
    for start, end in ((0, 3), (3, 4), (4, 10)):
        p = pos[start:end]
        mask = additive_mask(causal_mask(end - start, end, start), None, torch.float32)
        state.ensure(end - start)
        steps.append(attn(x[:, start:end], None, AttentionInputs(mask=mask, q_pos=p, k_pos=p), cache))
        state.advance(end - start)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.keys.shape[1] == n_kv_heads  # stored per KV head, not repeated


def test_growing_cross_attention_cache_equals_full_causal_cross_attention():
    attn = Attention(d_model=16, n_heads=4, n_kv_heads=2).eval()
    x, source = torch.randn(2, 6, 16), torch.randn(2, 6, 16)
    full = attn(x, source, AttentionInputs(mask=additive_mask(causal_mask(6, 6), None, torch.float32)))
    state = DecodeState(2, 6, "cpu", torch.float32)
    cache = state.new_caches(1)[0]
    steps = []
    for t in range(6):
        steps.append(attn(x[:, t : t + 1], source[:, t : t + 1], None, cache))
        state.advance(1)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_training_path_with_a_learned_bias_equals_sdpa_in_values_and_gradients(n_kv_heads):
    attn = Attention(d_model=32, n_heads=4, n_kv_heads=n_kv_heads, scale=False).train()
    x = torch.randn(2, 6, 32)
    bias = torch.randn(1, 4, 6, 6, requires_grad=True)  # like T5's relative bias: it needs a gradient
    mask = additive_mask(causal_mask(6, 6), bias, torch.float32)
    out = attn(x, None, AttentionInputs(mask=mask))
    out.sum().backward()
    grads = (bias.grad.clone(), attn.q.weight.grad.clone())
    bias.grad = None
    attn.zero_grad()
    mask = additive_mask(causal_mask(6, 6), bias, torch.float32)
    expected = reference_attention(attn, x, x, mask, scale=False)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[0], bias.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[1], attn.q.weight.grad, atol=1e-5, rtol=1e-5)


def test_training_path_with_dropout_and_causal_flag_matches_sdpa_when_dropout_is_zero():
    attn = Attention(d_model=16, n_heads=4, n_kv_heads=2, dropout=0.0).train()
    x = torch.randn(2, 5, 16)
    from encdec.modules.attention import attend

    q = torch.randn(2, 4, 5, 4)
    k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    explicit = attend(q, k, v, torch.zeros(1, 1, 5, 5, requires_grad=True), True, None, 0.0)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    assert attn(x, None, AttentionInputs(is_causal=True)).shape == (2, 5, 16)


def fp32_additive_mask(allowed, bias):
    """The mask as it was before autocast was considered: fp32's own min at blocked entries."""
    shape = allowed.shape if bias is None else torch.broadcast_shapes(allowed.shape, bias.shape)
    base = torch.zeros(shape) if bias is None else bias.expand(shape)
    return base.masked_fill(~allowed, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_blocked_entry_stays_finite_when_bf16_autocast_casts_the_fp32_mask(with_bias):
    allowed = torch.rand(2, 1, 5, 7) > 0.5
    bias = torch.randn(1, 3, 5, 7) if with_bias else None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mask = additive_mask(allowed, bias, torch.float32)
    assert mask.dtype == torch.float32
    cast = mask.to(torch.bfloat16)  # what CUDA autocast hands SDPA
    assert torch.isfinite(cast).all()
    blocked = ~allowed.expand(cast.shape)
    assert (cast[blocked] == torch.finfo(torch.bfloat16).min).all()
    assert torch.equal(cast[blocked].float(), mask[blocked])  # bf16's min is exact in fp32


@pytest.mark.parametrize("with_bias", [False, True])
def test_without_autocast_the_mask_is_bitwise_the_fp32_one(with_bias):
    allowed = torch.rand(2, 1, 5, 7) > 0.5
    bias = torch.randn(1, 3, 5, 7) if with_bias else None
    assert torch.equal(additive_mask(allowed, bias, torch.float32), fp32_additive_mask(allowed, bias))


@pytest.mark.parametrize("learned_bias", [False, True], ids=["sdpa", "explicit"])
def test_a_fully_blocked_row_averages_the_values_under_bf16_autocast(learned_bias):
    """The mask is cast to bf16 as CUDA autocast does before SDPA; the uniform average is what fp32 gives."""
    attn = Attention(d_model=8, n_heads=2).eval()
    x, source = torch.randn(1, 2, 8), torch.randn(1, 4, 8)
    allowed = torch.tensor([[True, False, True, True], [False] * 4])[None, None]  # (1, 1, T, S): query 1 sees nothing
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mask = additive_mask(allowed, None, torch.float32).to(torch.bfloat16)
        out = attn(
            x, source, AttentionInputs(mask=mask.requires_grad_(learned_bias))
        )  # a mask needing a gradient: explicit path
    assert torch.isfinite(out).all()
    uniform = attn.o(attn.v(source).mean(dim=1))  # every head averages every value
    torch.testing.assert_close(out[:, 1].float(), uniform.detach(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("mask_dtype", [None, torch.float32, torch.bfloat16], ids=["causal", "fp32", "bf16"])
def test_the_explicit_training_path_stays_finite_under_bf16_autocast_with_dropout(mask_dtype):
    attn = Attention(d_model=16, n_heads=4, n_kv_heads=2, dropout=0.3).train()
    x = torch.randn(2, 6, 16)
    allowed = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    allowed[1, :, 2] = False  # a fully blocked row
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mask = None if mask_dtype is None else additive_mask(allowed, None, torch.float32).to(mask_dtype)
        out = attn(x, None, AttentionInputs(mask=mask, is_causal=mask is None))
        out.float().sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("transposed", [False, True])
def test_a_step_against_a_filled_static_cache_equals_uncached_cross_attention(
    monkeypatch, n_kv_heads, scale, groups, transposed
):
    """Decoding's few queries read the frozen cache's keys (attend_transposed), stored in either layout, and
    give what attention to the encoder output gives, for beams sharing it (query groups) and a padding mask."""
    import encdec.modules.attention as attention
    from encdec.modules import StaticKVCache

    calls = []
    kernel = attention.attend_transposed
    monkeypatch.setattr(attention, "attend_transposed", lambda *a: calls.append(a[0].shape) or kernel(*a))

    torch.manual_seed(0)
    attn = Attention(32, 4, n_kv_heads=n_kv_heads, scale=scale).eval()
    memory = torch.randn(2, 7, 32)
    allowed = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    allowed[1, ..., 5:] = False
    mask = additive_mask(allowed, None, torch.float32)
    x = torch.randn(2 * groups, 1, 32)
    cache = StaticKVCache(transposed)
    with torch.inference_mode():
        cache.append(*attn.project_kv(memory))
        assert cache.frozen and cache.stored_keys.is_contiguous() and cache.keys_t.shape == (2, n_kv_heads, 8, 7)
        assert torch.equal(cache.keys, attn.project_kv(memory)[0]) and cache.stored_keys.shape[-1] == (
            7 if transposed else 8
        )
        got = attn(x, memory, AttentionInputs(mask=mask, query_groups=groups), cache)
        expanded = memory.repeat_interleave(groups, 0)
        want = attn(x, expanded, AttentionInputs(mask=mask.repeat_interleave(groups, 0)))
    assert calls == [(2, 4, groups, 8)]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("learned_bias", [False, True])
def test_recomputing_large_scores_in_the_backward_changes_no_value_gradient_or_random_draw(monkeypatch, learned_bias):
    """Scores past RECOMPUTE_SCORES are recomputed in the backward with the same dropout mask: the output,
    every gradient and the generator's state after the step equal keeping them, bit for bit."""
    import encdec.modules.attention as attention

    def step(threshold):
        monkeypatch.setattr(attention, "RECOMPUTE_SCORES", threshold)
        torch.manual_seed(0)
        attn = Attention(d_model=32, n_heads=4, n_kv_heads=2, dropout=0.3).train()
        x = torch.randn(3, 9, 32, requires_grad=True)
        bias = torch.randn(1, 4, 9, 9, requires_grad=learned_bias)
        out = attn(x, None, AttentionInputs(mask=additive_mask(causal_mask(9, 9), bias, torch.float32)))
        out.square().sum().backward()
        grads = [x.grad, attn.q.weight.grad, attn.v.weight.grad] + ([bias.grad] if learned_bias else [])
        return out, grads, torch.rand(4)

    kept, recomputed = step(1 << 40), step(1)
    assert torch.equal(kept[0], recomputed[0])
    assert all(torch.equal(a, b) for a, b in zip(kept[1], recomputed[1]))
    assert torch.equal(kept[2], recomputed[2])  # the recomputation drew nothing from the generator's stream


def test_masks_broadcast_without_importing_torch_fx():
    """additive_mask's shape arithmetic is its own: torch.broadcast_shapes imports torch.fx's symbolic shapes
    (seconds on a process's first call), which a decoding step must not pay."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from encdec.modules.attention import additive_mask, broadcast_shape\n"
        "mask = additive_mask(torch.ones(3, 1, 1, 5, dtype=torch.bool), torch.zeros(1, 4, 2, 5), torch.float32)\n"
        "assert mask.shape == (3, 4, 2, 5) and broadcast_shape((2, 1, 5), (4, 1)) == (2, 4, 5)\n"
        "print('torch.fx.experimental.symbolic_shapes' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_a_merged_step_whose_beams_share_a_memory_row_equals_the_memory_repeated_per_beam(n_kv_heads):
    """blocks.shared_memory_attention: 2 examples x 3 beams, each beam its own 5 keys, the example's 7 memory keys
    (its last 2 masked) read by its 3 beams together, equal the merged attention over the memory repeated per beam
    (what the decoder did before), GQA included; the memory is never repeated."""
    from dataclasses import replace

    from encdec.modules.blocks import shared_memory_attention

    attn = Attention(d_model=16, n_heads=4, n_kv_heads=n_kv_heads, d_head=8).eval()
    M, G = 2, 3
    keys, values = torch.randn(M, n_kv_heads, 7, 8), torch.randn(M, n_kv_heads, 7, 8)
    memory_mask = additive_mask(
        torch.arange(7)[None, None, None, :] < torch.tensor([7, 5])[:, None, None, None], None, torch.float32
    )
    own_k, own_v = torch.randn(M * G, n_kv_heads, 4, 8), torch.randn(M * G, n_kv_heads, 4, 8)

    class Written:  # a self-attention cache of 4 written columns
        frozen = False

        def append(self, k, v):
            return torch.cat([own_k, k], dim=2), torch.cat([own_v, v], dim=2)

    h = torch.randn(M * G, 1, 16)
    inputs = AttentionInputs(mask=torch.randn(1, 4, 1, 5))
    with torch.no_grad():
        got = shared_memory_attention(attn, h, inputs, Written(), keys, values, memory_mask)
        repeated = (keys.repeat_interleave(G, 0), values.repeat_interleave(G, 0))
        merged = replace(inputs, extra_kv=repeated, extra_mask=memory_mask.repeat_interleave(G, 0))
        want = attn(h, None, merged, Written())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
