"""Switch-style sparse mixture of experts (Fedus et al. 2021), dropless.

A bias-free router scores each token (softmax in fp32), the top-k experts run
on the tokens routed to them, and their outputs are summed with gate weights:
renormalised over the k chosen (ROT5; with k = 1 every gate is exactly 1, so the
router learns only through the aux and z losses) or the raw router probability
(Switch, the default here, so the router also learns from the task loss).

Dispatch sorts the N * k (token, slot) pairs by expert, runs every expert on its
contiguous run of rows, even an empty one, so that every expert's parameters are in
the graph (DDP needs that when an expert gets no tokens on one rank), and puts the
results back by the inverse permutation: no atomic scatter-add, so GPU runs repeat.

Shapes: N tokens (B * T flattened), k experts per token, C model dim, E experts.
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
        self.experts = nn.ModuleList(FeedForward(d_model, d_ff, activation, bias, dropout) for _ in range(n_experts))
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
        y = self.dispatch(flat, chosen)  # (N * k, C)
        out = (y.view(-1, self.top_k, flat.shape[-1]) * gates[..., None].to(flat.dtype)).sum(1)  # (N, C)
        return out.view_as(x), logits

    def dispatch(self, flat: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """flat (N, C), chosen (N, k) expert ids -> (N * k, C): row n * k + j is expert chosen[n, j] on token n.

        The expert sizes are read to the host once per call (one sync per MoE layer):
        `split` needs them, and a sync-free version would need a grouped GEMM.
        """
        N, k = chosen.shape
        expert_of = chosen.flatten()  # (N * k,)
        order = expert_of.argsort(stable=True)  # slots grouped by expert, in token order within each
        sizes = torch.bincount(expert_of, minlength=len(self.experts)).tolist()  # the host sync
        rows = flat[order // k]  # (N * k, C); the backward sums each token's k rows (sort-based on CUDA)
        ys = torch.cat([expert(part) for expert, part in zip(self.experts, rows.split(sizes))])  # (N * k, C)
        return ys[order.argsort()]  # the inverse permutation: unique indices, nothing accumulated


def load_balance_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """aux = E * sum_e f_e * P_e: f_e the fraction of tokens whose top-1 is e, P_e the mean probability of e."""
    n_experts = router_logits.shape[-1]
    probs = router_logits.float().softmax(dim=-1)
    fraction = F.one_hot(probs.argmax(dim=-1), n_experts).float().mean(dim=0)
    return n_experts * (fraction * probs.mean(dim=0)).sum()


def router_z_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """z = mean over tokens of logsumexp(router logits)^2 (Zoph et al. 2022, ST-MoE)."""
    return router_logits.float().logsumexp(dim=-1).pow(2).mean()
