"""The embedding loss (SEEDS.md 3) and the parallel model's encoder loss (SEEDS.md 4): one construction.

    E_ln   = LayerNorm_a(E)                  (embedding_ln_type INIT)
    avg[t] = mean(E_ln[0..t])                cumulative mean along T (embedding_aggregation MEAN)
           | sum_s<=t softmax_s(W[t, :t+1]) E_ln[s]                     (MATMUL)
    avg    = LayerNorm_a(avg)                (embedding_ln_type AVG_CUM_SUM instead)
    enc    = LayerNorm_b(encoder output)     (use_ln_on_encoder_out)
    loss   = MSE(avg, enc) | 1 - (cos + 1) / 2 | -log((cos + 1) / 2)
           | L1(avg, enc) | Huber(avg, enc), delta 1     (the seeds' "other disaffinity scores")

With embedding_norm_affine (default) both LayerNorms learn a gain and a bias whatever
model.bias says, as in the seeds' code; with it false neither learns anything, which
removes the degenerate minimum where MSE falls by shrinking both gains toward 0
(docs/experiments.md, "Why the embedding loss falls").

MATMUL is the seeds' "plain matmul" aggregation: W (max_positions, max_positions) starts at
zero, so each row's softmax is uniform over s <= t and avg is exactly the cumulative mean;
training may then weigh preceding tokens unequally. A window of T < max_positions uses
W's top-left T x T block. W holds P^2 parameters (40,000 at the seeds' context of 200, 4.2M
at 2048), those above the diagonal never used. Being 2-D, W takes the optimizer's weight
decay, which pulls it back toward the mean. The loss is computed in training only, never
while decoding.

`detach` stops the gradient into the embeddings (EMBEDDING) or the encoder (ENCODER_OUT);
the loss's own parameters (norms, W) train either way. With model.positions.kind rope, E holds
token embeddings alone.

Shapes: B batch, T length, C model dim, P max_positions.
"""

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


def cumulative_mean(x: torch.Tensor) -> torch.Tensor:
    """x (B, T, C) -> (B, T, C) whose row t is the mean of rows 0..t."""
    counts = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)
    return x.cumsum(dim=1) / counts[None, :, None]


class CausalMixing(nn.Module):
    """A learned causal average: row t of the output is sum_{s<=t} softmax_s(W[t, :t+1]) x[s]."""

    def __init__(self, max_positions: int):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(max_positions, max_positions))  # W (P, P): the mean at init

    def weights(self, T: int) -> torch.Tensor:
        """(T, T) mixing weights, rows summing to 1, zero above the diagonal."""
        W = self.logits[:T, :T]
        future = torch.ones(T, T, dtype=torch.bool, device=W.device).triu(1)
        return W.masked_fill(future, float("-inf")).softmax(dim=-1)  # the diagonal keeps every row finite

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C), T <= P -> (B, T, C)."""
        return self.weights(x.shape[1]).to(x.dtype) @ x  # (T, T) @ (B, T, C)


def disaffinity(kind: str, avg: torch.Tensor, enc: torch.Tensor) -> torch.Tensor:
    """A scalar: 0 when avg and enc agree. kind is MSE, COSINE, LOG_COSINE, L1 or HUBER."""
    if kind == "MSE":
        return F.mse_loss(avg, enc)
    if kind == "L1":
        return F.l1_loss(avg, enc)
    if kind == "HUBER":
        return F.huber_loss(avg, enc, delta=1.0)
    similarity = F.cosine_similarity(avg, enc, dim=-1)  # (B, T)
    if kind == "COSINE":
        return (1 - (similarity + 1) / 2).mean()
    if kind == "LOG_COSINE":
        return (-torch.log((similarity + 1) / 2)).mean()
    raise ValueError(f"unknown embedding loss {kind!r}")


class EmbeddingLoss(nn.Module):
    """Disaffinity between the encoder output and an aggregate (by default the cumulative mean) of the
    input embeddings. `max_positions` sizes the MATMUL aggregation's matrix."""

    def __init__(
        self,
        d_model: int,
        kind: str,
        detach: str,
        ln_type: str,
        use_ln_on_encoder_out: bool,
        eps: float = 1e-5,
        aggregation: str = "MEAN",
        max_positions: int | None = None,
        norm_affine: bool = True,
    ):
        super().__init__()
        self.kind, self.detach, self.ln_type = kind, detach, ln_type
        norm = partial(nn.LayerNorm, d_model, eps=eps, elementwise_affine=norm_affine)
        self.embedding_norm = norm() if ln_type != "NONE" else None  # LayerNorm_a
        self.encoder_norm = norm() if use_ln_on_encoder_out else None  # LayerNorm_b
        if aggregation == "MATMUL" and max_positions is None:
            raise ValueError("the MATMUL aggregation needs max_positions")
        self.aggregation = CausalMixing(max_positions) if aggregation == "MATMUL" else None  # None: the mean

    def aggregate(self, embeddings: torch.Tensor) -> torch.Tensor:
        """E (B, T, C) -> avg (B, T, C), row t aggregating rows 0..t."""
        return cumulative_mean(embeddings) if self.aggregation is None else self.aggregation(embeddings)

    def forward(self, embeddings: torch.Tensor, encoder_out: torch.Tensor) -> torch.Tensor:
        """embeddings E (B, T, C) (token + position, or token alone with RoPE), encoder_out (B, T, C) -> scalar loss."""
        if self.detach == "EMBEDDING":
            embeddings = embeddings.detach()
        elif self.detach == "ENCODER_OUT":
            encoder_out = encoder_out.detach()
        if self.encoder_norm is not None:
            encoder_out = self.encoder_norm(encoder_out)
        if self.ln_type == "INIT":
            embeddings = self.embedding_norm(embeddings)
        avg = self.aggregate(embeddings)
        if self.ln_type == "AVG_CUM_SUM":
            avg = self.embedding_norm(avg)
        return disaffinity(self.kind, avg, encoder_out)


def build_embedding_loss(cfg) -> EmbeddingLoss | None:
    """The loss module `cfg.research` asks for, or None (embedding_loss NONE)."""
    r = cfg.research
    if r.embedding_loss == "NONE":
        return None
    return EmbeddingLoss(
        cfg.d_model,
        r.embedding_loss,
        r.detach,
        r.embedding_ln_type,
        r.use_ln_on_encoder_out,
        cfg.norms.eps,
        aggregation=r.embedding_aggregation,
        max_positions=cfg.positions.max,
        norm_affine=r.embedding_norm_affine,
    )
