"""Whole tiny models under bf16: masks under autocast, RoPE's table under model.to(bfloat16).

A CPU cannot run CUDA's kernels, so `sdpa_as_on_cuda` stands in for them where it
matters: CUDA autocast casts SDPA's inputs, the mask included, to bf16, and its
kernels turn a row of -inf scores into NaN (torch's CPU SDPA returns zeros there).
"""

import math

import pytest
import torch

import encdec.modules.attention as attention
from encdec.models import build_model, preset
from encdec.modules import RotaryEmbedding

V = 97


def sdpa_as_on_cuda(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """softmax(q k^T * scale + mask) v with the mask cast to q's dtype and a plain softmax: NaN on an all -inf row."""
    H, T, S = q.shape[1], q.shape[2], k.shape[2]
    k, v = k.repeat_interleave(H // k.shape[1], dim=1), v.repeat_interleave(H // v.shape[1], dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if is_causal:
        scores = scores.masked_fill(~attention.causal_mask(T, S, S - T), -math.inf)
    if attn_mask is not None:
        scores = scores + attn_mask.to(q.dtype).float()
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


def padded_batch():
    """Three sources: 11 tokens, 2 tokens and none at all (a fully padded example)."""
    src, tgt = torch.randint(3, V, (3, 11)), torch.randint(3, V, (3, 6))
    mask = torch.zeros(3, 11, dtype=torch.bool)
    mask[0], mask[1, :2] = True, True
    return src, tgt, mask


def tiny(family: str):
    return build_model(preset(f"{family}-tiny", vocab_size=V, dropout=0.0)).eval()


def old_blocked_value(dtype, device_type):
    return torch.finfo(dtype).min


@pytest.mark.parametrize("family", ["t5", "rot5"])
def test_heavy_padding_gives_finite_logits_under_bf16_autocast(family, monkeypatch):
    model = tiny(family)
    src, tgt, mask = padded_batch()
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa_as_on_cuda)

    def logits():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(src, tgt, src_mask=mask).logits

    assert torch.isfinite(logits()).all()
    monkeypatch.setattr(attention, "blocked_value", old_blocked_value)
    assert torch.isnan(logits()[2]).all()  # the stand-in does reproduce the H100's NaN with fp32's min


@pytest.mark.parametrize("family", ["t5", "rot5"])
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_fp32_logits_are_bitwise_those_of_fp32s_own_min(family, grad, monkeypatch):
    model = tiny(family)
    src, tgt, mask = padded_batch()
    with torch.set_grad_enabled(grad):  # with a gradient, T5's learned bias takes the explicit path
        now = model(src, tgt, src_mask=mask).logits
        monkeypatch.setattr(attention, "blocked_value", old_blocked_value)
        before = model(src, tgt, src_mask=mask).logits
    assert torch.equal(now, before)


def test_rope_table_stays_fp32_after_model_to_bf16():
    model = tiny("rot5").to(torch.bfloat16)
    rope = model.encoder.rotary
    fresh = RotaryEmbedding(rope.d_head, rope.theta)
    assert rope.inv_freq.dtype == torch.float32
    assert torch.equal(rope.inv_freq, fresh.inv_freq)
    assert model.embed.weight.dtype == torch.bfloat16  # the rest of the model did go to bf16


def test_rope_rotation_at_position_511_in_bf16_is_the_fp32_rotation_rounded():
    model = tiny("rot5").to(torch.bfloat16)
    rope = model.encoder.rotary
    x = torch.randn(1, 2, 1, rope.d_head).to(torch.bfloat16)
    position = torch.tensor([511])
    want = RotaryEmbedding(rope.d_head, rope.theta)(x.float(), position)
    got = rope(x, position)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2**-8, atol=1e-6)  # within bf16's rounding of the output
    angles = position.float()[:, None] * rope.inv_freq.bfloat16().float()  # what a bf16 table gave
    angles = torch.cat((angles, angles), dim=-1)
    x1, x2 = x.float().chunk(2, dim=-1)
    stale = x.float() * angles.cos() + torch.cat((-x2, x1), dim=-1) * angles.sin()
    assert (stale - want).abs().max() > 0.05  # angles off by up to ~0.27 rad: far outside the tolerance above
