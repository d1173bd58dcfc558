"""Int8Linear: int8 weights per row, dynamically quantized activations, fp32 out."""

import pytest
import torch
import torch.nn.functional as F

from encdec.modules.int8_linear import Int8Linear, int8_supported

pytestmark = pytest.mark.skipif(not int8_supported(), reason="this torch build has no fbgemm int8 kernels")


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def test_output_is_close_to_the_fp32_product():
    weight, bias, x = torch.randn(96, 64) * 0.1, torch.randn(96), torch.randn(5, 64)
    layer = Int8Linear(weight, bias)
    assert relative_error(layer(x), F.linear(x, weight, bias)) < 0.02


def test_rows_with_very_different_ranges_each_keep_their_precision():
    weight = torch.randn(8, 64) * torch.logspace(-3, 1, 8)[:, None]  # row ranges 1e-3 .. 10: one scale per row needed
    x = torch.randn(4, 64)
    out, expected = Int8Linear(weight)(x), F.linear(x, weight)
    for row in range(8):
        assert relative_error(out[:, row], expected[:, row]) < 0.08  # one scale for all rows: > 1 on the small ones


def test_the_weight_is_stored_as_int8_per_row():
    weight = torch.randn(32, 16)
    stored = Int8Linear(weight).int8_weight()
    assert stored.dtype == torch.qint8 and stored.qscheme() == torch.per_channel_affine
    assert stored.q_per_channel_scales().shape == (32,) and not stored.q_per_channel_zero_points().any()  # symmetric
    assert stored.int_repr().element_size() == 1 and stored.int_repr().abs().max() <= 127
    assert relative_error(stored.dequantize(), weight) < 0.01


def test_leading_dimensions_are_kept():
    layer = Int8Linear(torch.randn(12, 8))
    assert layer(torch.randn(2, 3, 8)).shape == (2, 3, 12)
