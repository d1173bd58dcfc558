"""The attention tests' reference: softmax attention written out plainly, KV heads repeated, to compare with."""

import math

import torch

from encdec.modules import Attention


def reference_probs(attn: Attention, x, source, mask=None, scale=True, causal=False):
    """softmax(QK^T [/ sqrt(D)] + mask) with KV heads repeated: (B, H, T, S)."""
    B, T, _ = x.shape
    S = source.shape[1]
    H, K, D = attn.n_heads, attn.n_kv_heads, attn.d_head
    q = attn.q(x).view(B, T, H, D).transpose(1, 2)
    k = attn.k(source).view(B, S, K, D).transpose(1, 2).repeat_interleave(H // K, dim=1)
    scores = q @ k.transpose(-1, -2)
    if scale:
        scores = scores / math.sqrt(D)
    if mask is not None:
        scores = scores + mask
    if causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1)


def reference_attention(attn: Attention, x, source, mask=None, scale=True):
    """Plain softmax(QK^T [/ sqrt(D)] + mask) V with KV heads repeated, for comparison."""
    B, T, _ = x.shape
    S = source.shape[1]
    H, K, D = attn.n_heads, attn.n_kv_heads, attn.d_head
    v = attn.v(source).view(B, S, K, D).transpose(1, 2).repeat_interleave(H // K, dim=1)
    out = reference_probs(attn, x, source, mask, scale) @ v  # (B, H, T, D)
    return attn.o(out.transpose(1, 2).reshape(B, T, H * D))
