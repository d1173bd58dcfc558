"""T5's fp16 overflow: the feed-forward output projection runs in fp32 under fp16 autocast, and a half-precision
model clamps its residual stream, so both stay finite where plain fp16 gives inf (modules/fp16.py)."""

import torch

import encdec.modules.blocks as blocks
import encdec.modules.feed_forward as feed_forward
from encdec.models import build_model, preset
from encdec.modules import FeedForward


def loud_feed_forward() -> FeedForward:
    """A gated feed-forward whose output exceeds fp16's largest value (65,504) as trained T5 v1.1's do."""
    torch.manual_seed(0)
    ffn = FeedForward(16, 64, "gated_gelu")
    with torch.no_grad():
        for layer in (ffn.wi_0, ffn.wi_1):
            layer.weight.normal_(0, 1.0)
        ffn.wo.weight.fill_(40.0)
    return ffn


def test_the_output_projection_runs_in_fp32_under_fp16_autocast(monkeypatch):
    ffn, x = loud_feed_forward(), torch.randn(2, 5, 16) * 4
    expected = ffn(x)
    assert expected.abs().max() > 65_504  # fp16 cannot hold it
    with torch.autocast("cpu", dtype=torch.float16):
        got = ffn(x)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=1.0)  # the inner products in fp16
    monkeypatch.setattr(feed_forward, "fp16_autocast", lambda h: False)  # plain fp16 autocast overflows
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.isinf(ffn(x)).any()


def test_fp16_autocast_leaves_an_ordinary_t5_close_to_fp32():
    torch.manual_seed(0)
    model = build_model(preset("t5-v1.1-tiny", vocab_size=64, dropout=0.0)).eval()
    src, tgt = torch.randint(2, 64, (2, 9)), torch.randint(2, 64, (2, 5))
    expected = model(src, tgt).logits
    with torch.autocast("cpu", dtype=torch.float16):
        got = model(src, tgt).logits
    torch.testing.assert_close(got.float(), expected, rtol=0, atol=5e-2)


def test_a_half_precision_t5_clamps_its_residual_stream_instead_of_overflowing(monkeypatch):
    torch.manual_seed(0)
    model = build_model(preset("t5-v1.1-tiny", vocab_size=64, dropout=0.0)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ffn.wi_0.weight", "ffn.wi_1.weight")):
                p.normal_(0, 1.0)
            if name.endswith("ffn.wo.weight"):
                p.fill_(1e3)  # each feed-forward adds more than fp16 holds
    src, tgt = torch.randint(2, 64, (2, 9)), torch.randint(2, 64, (2, 5))
    logits = model.half()(src, tgt).logits
    assert logits.dtype == torch.float16 and torch.isfinite(logits).all()
    monkeypatch.setattr(blocks, "clamp_fp16", lambda x: x)
    assert not torch.isfinite(model(src, tgt).logits).all()  # unclamped, the stream overflows
