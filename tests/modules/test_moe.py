import math

import pytest
import torch

from encdec.modules import FeedForward, MoE, load_balance_loss, router_z_loss


@pytest.mark.parametrize("renormalize", [True, False])
def test_moe_with_one_expert_equals_its_feed_forward(renormalize):
    moe = MoE(d_model=16, d_ff=32, n_experts=1, renormalize=renormalize, activation="gelu").eval()
    ffn = FeedForward(16, 32, "gelu").eval()
    ffn.load_state_dict(moe.experts[0].state_dict())
    x = torch.randn(2, 5, 16)
    out, logits = moe(x)
    torch.testing.assert_close(out, ffn(x))
    assert logits.shape == (10, 1)


def test_each_token_goes_to_its_top_expert_weighted_by_its_probability():
    moe = MoE(d_model=8, d_ff=16, n_experts=4, top_k=1, renormalize=False).eval()
    x = torch.randn(1, 6, 8)
    out, logits = moe(x)
    probs = logits.softmax(-1)
    for t in range(6):
        e = probs[t].argmax().item()
        expected = moe.experts[e](x[0, t]) * probs[t, e]
        torch.testing.assert_close(out[0, t], expected, atol=1e-6, rtol=1e-5)


def test_top_k_renormalised_gates_sum_to_one():
    moe = MoE(d_model=8, d_ff=16, n_experts=4, top_k=2, renormalize=True).eval()
    for expert in moe.experts:  # identical experts: a convex combination returns the expert's output
        expert.load_state_dict(moe.experts[0].state_dict())
    x = torch.randn(1, 5, 8)
    torch.testing.assert_close(moe(x)[0], moe.experts[0](x), atol=1e-6, rtol=1e-5)


def test_load_balance_loss_equals_formula_on_hand_built_logits():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.5, 0.0]])
    probs = logits.softmax(-1)
    f = torch.tensor([2 / 4, 1 / 4, 1 / 4])  # top-1 experts: 0, 1, 2, 0
    expected = 3 * (f * probs.mean(0)).sum()
    torch.testing.assert_close(load_balance_loss(logits), expected)


def test_load_balance_loss_is_one_when_routing_is_uniform():
    assert load_balance_loss(torch.zeros(8, 4)).item() == pytest.approx(1.0)


def test_z_loss_equals_mean_squared_logsumexp():
    logits = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    expected = (math.log(math.e + math.e**2) ** 2 + math.log(2.0) ** 2) / 2
    assert router_z_loss(logits).item() == pytest.approx(expected, rel=1e-6)
