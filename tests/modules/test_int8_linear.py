"""Int8Linear: int8 weights per row, dynamically quantized activations; fbgemm's kernel and int_mm's (a GPU's,
run here on the CPU)."""

import pytest
import torch
import torch.nn.functional as F

from encdec.errors import ConfigError
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


# --- the int_mm kernel (a GPU's), run on the CPU: torch._int_mm is exact int32 there too ---

int_mm = pytest.mark.skipif(not int8_supported("int_mm"), reason="this torch build has no torch._int_mm")


@int_mm
def test_int_mm_output_is_close_to_the_fp32_product():
    weight, bias, x = torch.randn(96, 64) * 0.1, torch.randn(96), torch.randn(5, 64)
    layer = Int8Linear(weight, bias, kernel="int_mm")
    out = layer(x)
    assert relative_error(out, F.linear(x, weight, bias)) < 0.02
    assert out.dtype == torch.float32 and not torch.equal(out, F.linear(x, weight, bias))


@int_mm
def test_int_mm_rows_with_very_different_ranges_each_keep_their_precision():
    weight = torch.randn(64, 256) * torch.logspace(-3, 1, 64)[:, None]  # weight rows of ranges 1e-3 .. 10
    layer = Int8Linear(weight, kernel="int_mm")
    x = torch.randn(16, 256) * torch.logspace(-2, 2, 16)[:, None]  # input rows of ranges 1e-2 .. 100
    out, expected = layer(x), F.linear(x, weight)
    for row in range(16):  # one activation scale per input row: with one for all, the small rows would round to 0
        assert relative_error(out[row], expected[row]) < 0.05
    x = torch.randn(16, 256)
    out, expected = layer(x), F.linear(x, weight)
    for col in range(64):  # one weight scale per output row
        assert relative_error(out[:, col], expected[:, col]) < 0.05


@int_mm
def test_int_mm_keeps_leading_dimensions():
    layer = Int8Linear(torch.randn(16, 8), kernel="int_mm")
    assert layer(torch.randn(2, 3, 8)).shape == (2, 3, 16)


@int_mm
@pytest.mark.parametrize("rows", [1, 8, 16, 17, 40])
def test_int_mm_few_rows_padded_or_many_give_what_each_row_gives_alone(rows):
    layer = Int8Linear(torch.randn(24, 32), torch.randn(24), kernel="int_mm")
    x = torch.randn(rows, 32)
    one_by_one = torch.cat([layer(x[i : i + 1]) for i in range(rows)])  # 1 row each: padded to 32
    assert torch.equal(layer(x), one_by_one)


@int_mm
def test_int_mm_takes_bf16_and_gives_bf16():
    weight, x = torch.randn(32, 64) * 0.1, torch.randn(6, 64)
    out = Int8Linear(weight, kernel="int_mm")(x.bfloat16())
    assert out.dtype == torch.bfloat16
    assert relative_error(out.float(), F.linear(x, weight)) < 0.03


@int_mm
def test_int_mm_accumulates_exactly_the_int8_products_of_the_stored_weight():
    weight, bias, x = torch.randn(16, 40), torch.randn(16), torch.randn(3, 40) * 5
    layer = Int8Linear(weight, bias, kernel="int_mm")
    w_int8, w_scale = layer.weight_int8, layer.weight_scale
    assert w_int8.dtype == torch.int8 and w_int8.is_contiguous() and w_int8.abs().max() == 127
    assert torch.equal(w_scale, weight.abs().amax(dim=1) / 127)  # the fbgemm kernel's scales
    assert torch.equal(w_int8, (weight / w_scale[:, None]).round().to(torch.int8))
    x_scale = x.abs().amax(dim=1) / 127
    x_int8 = (x / x_scale[:, None]).round().to(torch.int8)
    acc = (x_int8.long() @ w_int8.long().T).float()  # by hand, in int64
    assert torch.equal(layer(x), acc * x_scale[:, None] * w_scale[None, :] + bias)


@int_mm
def test_int_mm_weight_is_int8_per_row_and_a_quarter_of_fp32():
    weight = torch.randn(32, 16)
    layer = Int8Linear(weight, kernel="int_mm")
    stored = layer.int8_weight()
    assert stored.dtype == torch.qint8 and torch.equal(stored.int_repr(), layer.weight_int8)
    assert layer.weight_int8.numel() * layer.weight_int8.element_size() * 4 == weight.numel() * weight.element_size()
    assert relative_error(stored.dequantize(), weight) < 0.01
    assert not layer.state_dict()  # quantized layers are rebuilt from a float checkpoint, never saved


@int_mm
def test_int_mm_refuses_features_that_are_not_multiples_of_8():
    with pytest.raises(ConfigError, match="the int_mm kernel needs in and out features that are multiples of 8"):
        Int8Linear(torch.randn(12, 8), kernel="int_mm")


def test_a_cpu_weight_takes_the_fbgemm_kernel_unless_told():
    assert Int8Linear(torch.randn(8, 8)).kernel == "fbgemm"
    assert Int8Linear(torch.randn(8, 8), kernel="int_mm").kernel == "int_mm"


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ConfigError, match="Int8Linear's kernel must be one of fbgemm, int_mm, got 'cublas'"):
        Int8Linear(torch.randn(8, 8), kernel="cublas")


@pytest.mark.cuda
def test_int_mm_on_a_gpu_gives_what_it_gives_on_the_cpu():
    weight, bias = torch.randn(64, 96) * 0.1, torch.randn(64)
    cpu = Int8Linear(weight, bias, kernel="int_mm")
    gpu = Int8Linear(weight.cuda(), bias.cuda())
    assert gpu.kernel == "int_mm" and torch.equal(gpu.weight_int8.cpu(), cpu.weight_int8)
    for rows in (1, 16, 40):
        x = torch.randn(rows, 96)
        expected = cpu(x)
        torch.testing.assert_close(gpu(x.cuda()).cpu(), expected, rtol=1e-5, atol=1e-5)  # int32 sums exact
        assert gpu(x.cuda().bfloat16()).dtype == torch.bfloat16
