import torch
import torch.nn.functional as F

from encdec.modules import FeedForward, RMSNorm, build_norm


def test_gated_gelu_multiplies_tanh_gelu_gate_by_linear_branch():
    ffn = FeedForward(8, 16, "gated_gelu").eval()
    x = torch.randn(3, 8)
    expected = ffn.wo(F.gelu(ffn.wi_0(x), approximate="tanh") * ffn.wi_1(x))
    torch.testing.assert_close(ffn(x), expected)


def test_swiglu_uses_silu_gate():
    ffn = FeedForward(8, 16, "swiglu").eval()
    x = torch.randn(3, 8)
    torch.testing.assert_close(ffn(x), ffn.wo(F.silu(ffn.wi_0(x)) * ffn.wi_1(x)))


def test_relu_feed_forward_has_t5_weight_names():
    assert set(dict(FeedForward(8, 16, "relu").named_parameters())) == {"wi.weight", "wo.weight"}


def test_rms_norm_scales_by_root_mean_square_without_centering():
    norm = RMSNorm(4, eps=0.0)
    x = torch.tensor([[1.0, 1.0, 1.0, 5.0]])
    torch.testing.assert_close(norm(x), x / torch.sqrt(torch.tensor(7.0)))


def test_layer_norm_without_bias_has_only_a_weight():
    assert [n for n, _ in build_norm("layernorm", 8, 1e-5, bias=False).named_parameters()] == ["weight"]
