"""The embedding loss (SEEDS.md 3) and the parallel model's encoder loss (SEEDS.md 4): one construction.

    E_ln   = LayerNorm_a(E)                  (embedding_ln_type INIT)
    avg[t] = mean(E_ln[1..t])                cumulative mean along T
    avg    = LayerNorm_a(avg)                (embedding_ln_type AVG_CUM_SUM instead)
    enc    = LayerNorm_b(encoder output)     (use_ln_on_encoder_out)
    loss   = MSE(avg, enc) | 1 - (cos + 1) / 2 | -log((cos + 1) / 2)

Both LayerNorms have a bias whatever model.bias says, as in the seeds' code.
`detach` stops the gradient into the embeddings (EMBEDDING) or the encoder (ENCODER_OUT).

Shapes: B batch, T length, C model dim.
"""

import torch
import torch.nn.functional as F
from torch import nn


def cumulative_mean(x: torch.Tensor) -> torch.Tensor:
    """x (B, T, C) -> (B, T, C) whose row t is the mean of rows 0..t."""
    counts = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)
    return x.cumsum(dim=1) / counts[None, :, None]


def disaffinity(kind: str, avg: torch.Tensor, enc: torch.Tensor) -> torch.Tensor:
    """A scalar: 0 when avg and enc agree. kind is MSE, COSINE or LOG_COSINE."""
    if kind == "MSE":
        return F.mse_loss(avg, enc)
    similarity = F.cosine_similarity(avg, enc, dim=-1)  # (B, T)
    if kind == "COSINE":
        return (1 - (similarity + 1) / 2).mean()
    if kind == "LOG_COSINE":
        return (-torch.log((similarity + 1) / 2)).mean()
    raise ValueError(f"unknown embedding loss {kind!r}")


class EmbeddingLoss(nn.Module):
    """Disaffinity between the encoder output and the cumulative mean of the input embeddings."""

    def __init__(
        self, d_model: int, kind: str, detach: str, ln_type: str, use_ln_on_encoder_out: bool, eps: float = 1e-5
    ):
        super().__init__()
        self.kind, self.detach, self.ln_type = kind, detach, ln_type
        self.embedding_norm = nn.LayerNorm(d_model, eps=eps) if ln_type != "NONE" else None  # LayerNorm_a
        self.encoder_norm = nn.LayerNorm(d_model, eps=eps) if use_ln_on_encoder_out else None  # LayerNorm_b

    def forward(self, embeddings: torch.Tensor, encoder_out: torch.Tensor) -> torch.Tensor:
        """embeddings E (B, T, C) (token + position), encoder_out (B, T, C) -> scalar loss."""
        if self.detach == "EMBEDDING":
            embeddings = embeddings.detach()
        elif self.detach == "ENCODER_OUT":
            encoder_out = encoder_out.detach()
        if self.encoder_norm is not None:
            encoder_out = self.encoder_norm(encoder_out)
        if self.ln_type == "INIT":
            embeddings = self.embedding_norm(embeddings)
        avg = cumulative_mean(embeddings)
        if self.ln_type == "AVG_CUM_SUM":
            avg = self.embedding_norm(avg)
        return disaffinity(self.kind, avg, encoder_out)


def build_embedding_loss(cfg) -> EmbeddingLoss | None:
    """The loss module `cfg.research` asks for, or None (embedding_loss NONE)."""
    r = cfg.research
    if r.embedding_loss == "NONE":
        return None
    return EmbeddingLoss(
        cfg.d_model, r.embedding_loss, r.detach, r.embedding_ln_type, r.use_ln_on_encoder_out, cfg.norm_eps
    )
