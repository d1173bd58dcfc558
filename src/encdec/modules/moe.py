"""Switch-style sparse mixture of experts (Fedus et al. 2021), dropless unless given a capacity.

A bias-free router scores each token (softmax in fp32), the top-k experts run
on the tokens routed to them, and their outputs are summed with gate weights:
renormalised over the k chosen (ROT5; with k = 1 every gate is exactly 1, so the
router learns only through the aux and z losses) or the raw router probability
(Switch, the default here, so the router also learns from the task loss).

Dispatch sorts the N * k (token, slot) pairs by expert, runs every expert on its
contiguous run of rows, even an empty one, so that every expert's parameters are in
the graph (DDP needs that when an expert gets no tokens on one rank), and puts the
results back by the inverse permutation: no atomic scatter-add, so GPU runs repeat.

With a capacity (`Routing`, GShard's top-2 gating as fairseq's NLLB-MoE and transformers' NllbMoeTop2Router
compute it) an expert takes at most `capacity` (token, choice) pairs a forward: every token's first choice is
placed before any second one, in token order or, `batch_prioritized`, in order of top probability; a pair past
the capacity is dropped, so a token none of whose choices is kept leaves its sublayer as the residual alone.
Padding may take no expert, a later choice may be kept at random (`random`) or chosen among noisy logits
(`sampling`), and the gates renormalised before or after the drops. Dropped pairs run no expert.

Shapes: N tokens (B * T flattened), k experts per token, C model dim, E experts.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from encdec.modules.feed_forward import FeedForward


@dataclass(frozen=True)
class Routing:
    """Which of its top-k choices a token keeps (the defaults: every one, as dropless Switch routes them)."""

    capacity: int | None = None  # (token, choice) pairs an expert takes a training forward; None: all of them
    eval_capacity_fraction: float = 0.0  # above 0: ceil(fraction * tokens) in evaluation, else `capacity`
    second_expert_policy: str = "all"  # "random": a later choice kept if 2 p > u, u ~ U(0, 1); "sampling": Gumbel
    normalize_before_dropping: bool = False  # renormalised gates from the choices before the drops, else after
    batch_prioritized: bool = False  # the capacity filled in order of each token's top probability
    token_dropout: float = 0.0  # dropout of each weighted expert output in training, a scale 1 - p in evaluation
    route_padding: bool = True  # False: a padding token (where `real` says) takes no expert and no capacity

    def drops(self) -> bool:
        """Whether any choice can be left out (else every one is routed, with no bookkeeping)."""
        return (
            self.capacity is not None
            or self.eval_capacity_fraction > 0
            or self.second_expert_policy == "random"
            or not self.route_padding
        )

    def limit(self, tokens: int, training: bool) -> int | None:
        """The pairs an expert takes in a forward of `tokens` (None: no limit)."""
        if not training and self.eval_capacity_fraction > 0:
            return math.ceil(self.eval_capacity_fraction * tokens)
        return self.capacity

    def kept(self, chosen, gates, probs, real, training: bool) -> torch.Tensor:
        """chosen, gates (N, k), probs (N, E), real (N,) bool or None -> (N, k) bool, the choices routed."""
        kept = torch.ones_like(chosen, dtype=torch.bool)
        if self.second_expert_policy == "random":
            kept[:, 1:] = 2 * gates[:, 1:] > torch.rand_like(gates[:, 1:])
        if real is not None and not self.route_padding:
            kept &= real[:, None]
        limit = self.limit(chosen.shape[0], training)
        if limit is None:
            return kept
        # a pair's place in its expert's queue: the pairs of earlier choices first, then this choice's in order
        order = probs.max(dim=-1).values.argsort(descending=True, stable=True) if self.batch_prioritized else None
        taken = torch.zeros(probs.shape[-1], dtype=torch.long, device=chosen.device)  # (E,) places taken so far
        for j in range(chosen.shape[1]):
            one_hot = F.one_hot(chosen[:, j], probs.shape[-1]) * kept[:, j, None]  # (N, E)
            ranked = one_hot if order is None else one_hot[order]
            places = ranked.cumsum(dim=0) - 1 + taken
            if order is not None:
                places = places[order.argsort()]
            kept[:, j] &= places.gather(1, chosen[:, j, None])[:, 0] < limit
            taken = taken + one_hot.sum(dim=0)
        return kept


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
        routing: Routing = Routing(),
    ):
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(d_model, d_ff, activation, bias, dropout) for _ in range(n_experts))
        self.top_k = top_k
        self.renormalize = renormalize
        self.routing = routing

    def forward(self, x: torch.Tensor, real: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C), real (B, T) bool or None (every token real) -> output (B, T, C) and router logits (N, E)
        for the losses."""
        flat = x.reshape(-1, x.shape[-1])  # (N, C)
        logits = self.router(flat).float()  # (N, E)
        probs = logits.softmax(dim=-1)
        chosen = self.choose(logits, probs)  # (N, k)
        gates = probs.gather(1, chosen)
        kept = None
        if self.routing.drops():
            real = None if real is None else real.reshape(-1).bool()
            kept = self.routing.kept(chosen, gates, probs, real, self.training)
        before = self.renormalize and self.routing.normalize_before_dropping
        for normalize, mask in ((before, None), (self.renormalize and not before, kept)):
            gates = gates if mask is None else gates * mask
            if normalize:
                gates = gates / gates.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(gates.dtype).eps)
        y = self.dispatch(flat, chosen, kept)  # (N * k, C)
        weighted = y.view(-1, self.top_k, flat.shape[-1]) * gates[..., None].to(flat.dtype)  # (N, k, C)
        p = self.routing.token_dropout
        if p > 0:
            weighted = F.dropout(weighted, p) if self.training else weighted * (1 - p)
        return weighted.sum(1).view_as(x), logits

    def choose(self, logits: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """Each token's top-k experts (N, k): by probability, or with `sampling` the first so and the later ones
        by the logits plus Gumbel noise (GShard's sampled second expert)."""
        if self.routing.second_expert_policy != "sampling" or self.top_k == 1:
            return probs.topk(self.top_k, dim=-1).indices
        first = probs.argmax(dim=-1, keepdim=True)
        gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp(min=1e-20)))
        noisy = (logits + gumbel).scatter(1, first, float("-inf"))
        return torch.cat([first, noisy.topk(self.top_k - 1, dim=-1).indices], dim=1)

    def dispatch(self, flat: torch.Tensor, chosen: torch.Tensor, kept: torch.Tensor | None = None) -> torch.Tensor:
        """flat (N, C), chosen (N, k) expert ids, kept (N, k) bool or None (all) -> (N * k, C): row n * k + j is
        expert chosen[n, j] on token n, zeros where that choice is not kept.

        The expert sizes are read to the host once per call (one sync per MoE layer): `split` needs them. While
        torch.compile traces (a training step taken whole) `dispatch_dense` takes its place, without that sync.
        """
        if torch.compiler.is_compiling():
            return self.dispatch_dense(flat, chosen, kept)
        N, k = chosen.shape
        E = len(self.experts)
        expert_of = chosen.flatten() if kept is None else chosen.flatten().where(kept.flatten(), E)  # (N * k,)
        order = expert_of.argsort(stable=True)  # slots grouped by expert, in token order within each; dropped last
        sizes = torch.bincount(expert_of, minlength=E + 1).tolist()  # the host sync
        rows = flat[order // k]  # (N * k, C); the backward sums each token's k rows (sort-based on CUDA)
        parts = rows.split(sizes)
        ys = torch.cat([*(expert(part) for expert, part in zip(self.experts, parts)), torch.zeros_like(parts[E])])
        return ys[order.argsort()]  # the inverse permutation: unique indices, nothing accumulated

    def dispatch_dense(
        self, flat: torch.Tensor, chosen: torch.Tensor, kept: torch.Tensor | None = None
    ) -> torch.Tensor:
        """dispatch's result with shapes that do not depend on the routing: every expert on every token, each
        (token, choice) row picked from its expert's. E / k times the routed FLOPs, no host read: the sync-free
        form until a grouped GEMM takes fp32 (torch's grouped_mm traces bf16 only)."""
        N, k = chosen.shape
        ys = torch.stack([expert(flat) for expert in self.experts], dim=1)  # (N, E, C)
        picked = ys.gather(1, chosen[..., None].expand(N, k, ys.shape[-1]))  # (N, k, C)
        if kept is not None:
            picked = picked * kept[..., None].to(picked.dtype)
        return picked.reshape(N * k, -1)


def load_balance_loss(router_logits: torch.Tensor, top_k: int = 1, real: torch.Tensor | None = None) -> torch.Tensor:
    """aux = E * sum_e f_e * P_e: f_e the fraction of tokens whose top-1 is e (with top_k k, the sum over their
    k choices of the fraction whose j-th is e, as transformers' load_balancing_loss_func counts them), P_e the mean
    probability of e; both over the rows `real` (N,) bool keeps, every row without it (masked sums, no
    data-dependent shape: a compiled step traces it whole)."""
    n_experts = router_logits.shape[-1]
    probs = router_logits.float().softmax(dim=-1)
    chosen = F.one_hot(probs.topk(top_k, dim=-1).indices, n_experts).float().sum(dim=1)  # (N, E)
    return n_experts * (_mean_over(chosen, real) * _mean_over(probs, real)).sum()


def router_z_loss(router_logits: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """z = mean over tokens (those `real` (N,) bool keeps, where given) of logsumexp(router logits)^2 (Zoph et al.
    2022, ST-MoE)."""
    return _mean_over(router_logits.float().logsumexp(dim=-1).pow(2), real)


def _mean_over(x: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
    """x (N, ...) averaged over its first dimension, over the rows `real` (N,) bool keeps where given: a sum of
    x masked by the mask divided by its count (torch's mean, bit for bit, where every row is kept)."""
    if real is None:
        return x.mean(dim=0)
    weight = real.to(x.dtype).reshape(-1, *([1] * (x.dim() - 1)))
    return (x * weight).sum(dim=0) / weight.sum().clamp(min=1)
