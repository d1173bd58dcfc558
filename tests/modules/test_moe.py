import math

import pytest
import torch

from encdec.modules import FeedForward, MoE, Routing, load_balance_loss, router_z_loss


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


def loop_moe_forward(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The dispatch MoE.forward replaced: a nonzero() and an index_add_ per expert, experts without tokens skipped."""
    flat = x.reshape(-1, x.shape[-1])
    probs = moe.router(flat).float().softmax(dim=-1)
    gates, chosen = probs.topk(moe.top_k, dim=-1)
    if moe.renormalize:
        gates = gates / gates.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(flat)
    for e, expert in enumerate(moe.experts):
        token, slot = (chosen == e).nonzero(as_tuple=True)
        if token.numel():
            out.index_add_(0, token, expert(flat[token]) * gates[token, slot, None].to(flat.dtype))
    return out.view_as(x)


@pytest.mark.parametrize("top_k,renormalize", [(1, False), (2, True), (2, False)])
@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_sorted_dispatch_equals_the_per_expert_loop_bitwise_and_in_gradients(top_k, renormalize, activation):
    moe = MoE(d_model=16, d_ff=32, n_experts=4, top_k=top_k, renormalize=renormalize, activation=activation)
    x = torch.randn(3, 7, 16, requires_grad=True)
    out, _ = moe(x)
    expected = loop_moe_forward(moe, x)
    assert torch.equal(out, expected)
    weight = torch.randn_like(out)
    grads = torch.autograd.grad((out * weight).sum(), [x, *moe.parameters()])
    expected_grads = torch.autograd.grad((expected * weight).sum(), [x, *moe.parameters()])
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("top_k", [1, 2])
def test_an_expert_that_gets_no_token_still_gets_a_zero_gradient(top_k):
    moe = MoE(d_model=8, d_ff=16, n_experts=4, top_k=top_k)
    with torch.no_grad():
        moe.router.weight[3] = 0.0
        moe.router.weight[3, 0] = -100.0
    x = torch.randn(2, 5, 8)
    x[..., 0] = 10.0  # expert 3's logit is -1000: in no token's top k
    out, logits = moe(x)
    assert not (logits.topk(top_k, -1).indices == 3).any()
    out.sum().backward()
    for p in moe.experts[3].parameters():
        assert p.grad is not None and torch.equal(p.grad, torch.zeros_like(p))
    assert all(p.grad is not None for p in moe.parameters())


def test_moe_with_large_experts_runs_an_empty_expert_in_inference():
    moe = MoE(d_model=64, d_ff=4096, n_experts=3).eval()  # weights large enough for decoding_linear's CPU kernel
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[0, 0] = 1.0
    x = torch.zeros(1, 4, 64)
    x[..., 0] = 1.0  # every token to expert 0: experts 1 and 2 run on no rows
    with torch.no_grad():
        out, _ = moe(x)
    torch.testing.assert_close(out, loop_moe_forward(moe, x))


def nllb_router(moe: MoE, **config):
    """transformers' NllbMoeTop2Router (fairseq's top-2 gating) over `moe`'s router weight."""
    nllb = pytest.importorskip("transformers.models.nllb_moe.modeling_nllb_moe")
    hf_config = nllb.NllbMoeConfig(d_model=moe.router.in_features, num_experts=len(moe.experts), **config)
    router = nllb.NllbMoeTop2Router(hf_config)
    router.classifier.weight.data.copy_(moe.router.weight)
    return router.train(moe.training)


ROUTINGS = {  # Routing's fields, then the same as NllbMoeConfig's keys (padding takes no expert unless routed)
    "eval fraction": ({"eval_capacity_fraction": 0.3}, {"moe_eval_capacity_token_fraction": 0.3}),
    "padding routed": (
        {"eval_capacity_fraction": 0.3, "route_padding": True},
        {"moe_eval_capacity_token_fraction": 0.3, "router_ignore_padding_tokens": True},
    ),
    "prioritized": (
        {"eval_capacity_fraction": 0.25, "batch_prioritized": True},
        {"moe_eval_capacity_token_fraction": 0.25, "batch_prioritized_routing": True},
    ),
    "normalized first": (
        {"eval_capacity_fraction": 0.2, "normalize_before_dropping": True},
        {"moe_eval_capacity_token_fraction": 0.2, "normalize_router_prob_before_dropping": True},
    ),
    "token dropout": (
        {"eval_capacity_fraction": 0.25, "token_dropout": 0.2},
        {"moe_eval_capacity_token_fraction": 0.25, "moe_token_dropout": 0.2},
    ),
    "training capacity": (
        {"capacity": 3, "eval_capacity_fraction": 1.0},
        {"expert_capacity": 3, "moe_eval_capacity_token_fraction": 1.0},
    ),
}


@pytest.mark.parametrize("case", ROUTINGS)
def test_top_2_routing_with_capacity_combines_the_experts_as_transformers_nllb_router_weighs_them(case):
    """Each token's output is sum_e w[n, e] expert_e(x_n), w the combine weights NllbMoeTop2Router returns (the
    gates after the capacity's drops; transformers 4.x's NllbMoeSparseMLP summed them so), times 1 - p in
    evaluation with token dropout p."""
    routing = Routing(**{"route_padding": False, **ROUTINGS[case][0]})
    torch.manual_seed(0)
    moe = MoE(d_model=8, d_ff=16, n_experts=4, top_k=2, renormalize=True, routing=routing)
    moe.train(case == "training capacity")
    router = nllb_router(moe, **ROUTINGS[case][1])
    x = torch.randn(3, 6, 8)
    real = torch.ones(3, 6, dtype=torch.bool)
    real[1, 4:] = real[2, 2:] = False
    flat = x.view(-1, 8)
    with torch.no_grad():
        out, logits = moe(x, real)
        _, weights, hf_logits = router(flat, padding_mask=~real.flatten())  # weights (N, E)
        experts = torch.stack([expert(flat) for expert in moe.experts], dim=1)  # (N, E, C)
    expected = (weights[..., None] * experts).sum(1) * (1 - routing.token_dropout if not moe.training else 1)
    routed = real.numel() if routing.route_padding else real.sum()
    assert (weights > 0).sum() < 2 * routed  # the capacity drops some choices
    torch.testing.assert_close(logits, hf_logits)
    torch.testing.assert_close(out.view(-1, 8), expected, atol=1e-6, rtol=1e-5)


def test_a_token_whose_choices_are_all_dropped_is_zero_and_its_experts_run_on_no_row():
    moe = MoE(d_model=8, d_ff=16, n_experts=2, top_k=2, renormalize=True, routing=Routing(capacity=1)).train()
    calls = []
    for expert in moe.experts:
        expert.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    out, _ = moe(torch.randn(1, 4, 8))
    assert calls == [1, 1]  # one pair each: the first token's two choices, or the first choices of two tokens
    assert (out[0].abs().sum(-1) == 0).sum() >= 2


def test_random_policy_keeps_a_second_choice_with_probability_twice_its_gate():
    torch.manual_seed(0)
    moe = MoE(d_model=8, d_ff=16, n_experts=4, top_k=2, routing=Routing(second_expert_policy="random")).eval()
    chosen = torch.tensor([[0, 1]] * 20000)
    gates = torch.tensor([[0.7, 0.2]] * 20000)
    kept = moe.routing.kept(chosen, gates, torch.zeros(20000, 4), None, training=False)
    assert kept[:, 0].all() and kept[:, 1].float().mean().item() == pytest.approx(0.4, abs=0.02)


def test_sampling_policy_keeps_the_first_choice_and_never_repeats_it():
    torch.manual_seed(0)
    moe = MoE(d_model=8, d_ff=16, n_experts=4, top_k=2, routing=Routing(second_expert_policy="sampling"))
    logits = torch.randn(500, 4)
    chosen = moe.choose(logits, logits.softmax(-1))
    assert torch.equal(chosen[:, 0], logits.argmax(-1)) and (chosen[:, 0] != chosen[:, 1]).all()
    assert not torch.equal(chosen[:, 1], logits.topk(2).indices[:, 1])  # noisy: not always the second best
