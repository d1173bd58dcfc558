import pytest
import torch
import torch.nn.functional as F

from encdec.modules import FeedForward, RMSNorm, build_norm, feed_forward


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


@pytest.mark.parametrize("activation", ["gelu", "relu", "gated_gelu"])
def test_a_cpu_inference_hidden_over_its_bound_is_computed_by_row_pieces_with_the_whole_block_s_values(
    activation, monkeypatch
):
    """Without gradients on a CPU, a hidden (rows x d_ff) over HIDDEN_BYTES is made by row pieces, none over it
    (glibc hands a block over 32 MB back to the system at each free, so a whole hidden was faulted in afresh at
    every layer); the values are the whole block's."""
    torch.manual_seed(0)
    ffn = FeedForward(16, 64, activation, bias=True).eval()
    x = torch.randn(3, 50, 16)
    with torch.no_grad():
        whole = ffn(x)
        monkeypatch.setattr(feed_forward, "HIDDEN_BYTES", 64 * 4 * 40)  # 40 rows' hidden
        assert feed_forward.hidden_pieces(x, 64) == 4  # 150 rows: 4 pieces of at most 40
        pieces = ffn(x)
        seen = []
        monkeypatch.setattr(FeedForward, "whole", lambda self, rows: seen.append(rows.shape[0]) or rows[:, :16])
        ffn(x)
    torch.testing.assert_close(pieces, whole, atol=1e-6, rtol=0)
    assert seen == [38, 38, 37, 37]
    assert feed_forward.hidden_pieces(x.requires_grad_(), 64) == 1  # training: one piece, as autograd keeps it


def test_a_hidden_within_its_bound_is_one_piece_and_a_piece_is_never_empty(monkeypatch):
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert feed_forward.hidden_pieces(x, 32) == 1
        monkeypatch.setattr(feed_forward, "HIDDEN_BYTES", 1)
        assert feed_forward.hidden_pieces(x, 32) == 10  # one row a piece at the least
