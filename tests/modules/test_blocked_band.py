"""A band attended by blocks (modules.blocked_band) computes what the whole scores compute: for a band each side
and a split one, T5's bias beside it, padding and packing, grouped-query heads, inputs shorter than a block and
not a multiple of it, in groups of blocks recomputed in the backward pass or all at once: outputs and the
gradients of q, k, v and the bias table within 1e-5 in float32."""

import pytest
import torch

from encdec.modules import blocked_band
from encdec.modules.attention import blocked_value, explicit_attention
from encdec.modules.attention_kinds import Band, Full, RelativeBias, layer_mask
from encdec.modules.blocked_band import BandBlocks, band_pattern, blocked_attend
from encdec.modules.masks import same_segment
from encdec.modules.positions import RelativePositionBias

H, K, D, BAND = 4, 2, 8, 5


def inputs(T: int, batch: str):
    """Segments (B, T) of the batch's kind: 'none' every token real, 'padded' the second row's last third
    padding, 'packed' two examples a row and the second row's end padding."""
    g = torch.Generator().manual_seed(T)
    q = torch.randn(2, H, T, D, generator=g, requires_grad=True)
    k, v = (torch.randn(2, K, T, D, generator=g, requires_grad=True) for _ in range(2))
    position = torch.arange(T)
    if batch == "none":
        segments = torch.ones(2, T, dtype=torch.long)
    elif batch == "padded":
        segments = torch.stack([position >= 0, position < max(1, 2 * T // 3)]).long()
    else:
        segments = torch.stack([1 + (position >= T // 2), (1 + (position >= T // 3)) * (position < T - 2)]).long()
    return q, k, v, segments


@pytest.mark.parametrize("T", [3, 6, 13, 37])
@pytest.mark.parametrize("batch", ["none", "padded", "packed"])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("group", [1, 1 << 22])
def test_blocks_equal_the_whole_scores_gradients_included(T, batch, split, group, monkeypatch):
    monkeypatch.setattr(blocked_band, "GROUP_SCORES", group)
    torch.manual_seed(0)
    table = RelativePositionBias(H, True, 8, 16)
    kinds = (Full(), Band(BAND, split=split), RelativeBias(table))
    q, k, v, segments = inputs(T, batch)
    position = torch.arange(T)
    packed = batch == "packed"
    allowed = same_segment(segments, segments) if packed else segments.bool()[:, None, None, :]
    whole = explicit_attention(q, k, v, layer_mask(kinds, allowed, position, position, q.dtype), False, None, 0.0)
    pattern = band_pattern(lambda qp, kp: layer_mask(kinds, None, qp, kp, q.dtype), BAND, q.device)
    blocks = BandBlocks(BAND + 1, pattern, segments, segments if packed else None, blocked_value(q.dtype, "cpu"))
    by_blocks = blocked_attend(q, k, v, blocks, None, 0.0)
    real = segments.bool()[:, None, :, None]  # a padding query may see no key (none real in its band): not read
    assert ((by_blocks - whole) * real).abs().max() < 1e-5
    weights = torch.randn(whole.shape, generator=torch.Generator().manual_seed(1)) * real
    wrt = (q, k, v, table.embed.weight)
    expected = torch.autograd.grad((whole * weights).sum(), wrt)
    got = torch.autograd.grad((by_blocks * weights).sum(), wrt)
    assert max((a - b).abs().max().item() for a, b in zip(got, expected, strict=True)) < 1e-5
