"""Switch-style sparse mixture of experts (Fedus et al. 2021), dropless.

A bias-free router scores each token (softmax in fp32), the top-k experts run
on the tokens routed to them, and their outputs are summed with gate weights:
renormalised over the k chosen (ROT5; with k = 1 every gate is exactly 1, so the
router learns only through the aux and z losses) or the raw router probability
(Switch, the default here, so the router also learns from the task loss).

Shapes: N tokens (B * T flattened), C model dim, E experts.
"""

import torch
import torch.nn.functional as F
from torch import nn

from encdec.modules.feed_forward import FeedForward


class MoE(nn.Module):
    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int,
        top_k: int = 1,
        renormalize: bool = False,
        activation: str = "gelu",
        bias: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(
            FeedForward(d_model, d_ff, activation, bias, dropout) for _ in range(n_experts)
        )
        self.top_k = top_k
        self.renormalize = renormalize

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C) -> output (B, T, C) and router logits (N, E) for the losses."""
        flat = x.reshape(-1, x.shape[-1])  # (N, C)
        logits = self.router(flat).float()  # (N, E)
        probs = logits.softmax(dim=-1)
        gates, chosen = probs.topk(self.top_k, dim=-1)  # (N, k)
        if self.renormalize:
            gates = gates / gates.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel():
                y = expert(flat[token]) * gates[token, slot, None].to(flat.dtype)
                out.index_add_(0, token, y)
        return out.view_as(x), logits


def load_balance_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """aux = E * sum_e f_e * P_e: f_e the fraction of tokens whose top-1 is e, P_e the mean probability of e."""
    n_experts = router_logits.shape[-1]
    probs = router_logits.float().softmax(dim=-1)
    fraction = F.one_hot(probs.argmax(dim=-1), n_experts).float().mean(dim=0)
    return n_experts * (fraction * probs.mean(dim=0)).sum()


def router_z_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """z = mean over tokens of logsumexp(router logits)^2 (Zoph et al. 2022, ST-MoE)."""
    return router_logits.float().logsumexp(dim=-1).pow(2).mean()
