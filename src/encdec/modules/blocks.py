"""Residual blocks: an encoder layer (self-attention, feed-forward) and a decoder
layer (causal self-attention, cross-attention, feed-forward), pre- or post-norm.

    pre-norm  (T5, GPT):      x = x + dropout(sublayer(norm(x)))
    post-norm (Vaswani 2017): x = norm(x + dropout(sublayer(x)))
    pre- and post-sublayer norms (Gemma 2): x = x + dropout(post_norm(sublayer(norm(x))))

A decoder layer without a cross-attention merges it into its self-attention (T5Gemma 2): one softmax over its
own keys and the memory's.

A feed-forward sublayer may be an `MoE`, whose router logits the block returns
so the model can gather them across layers for the aux and z losses.

Shapes: B batch, T target length, S source length, C model dim.
"""

from dataclasses import replace
from functools import partial

import torch
from torch import nn

from encdec.modules.attention import Attention, AttentionInputs, attention_scores, softmax
from encdec.modules.dropout import Dropout
from encdec.modules.fp16 import clamp_fp16
from encdec.modules.kv_cache import LayerCache
from encdec.modules.moe import MoE


def for_layer(inputs: list[AttentionInputs], layer: int) -> AttentionInputs:
    """Layer `layer`'s inputs from a list of one that every layer shares (T5's bias, or none) or one per layer
    (UMT5's biases)."""
    return inputs[layer if len(inputs) > 1 else 0]


def residual(x, fn, norm: nn.Module, dropout: nn.Module, pre_norm: bool, post_norm: nn.Module | None = None):
    """Apply `fn` as a residual sublayer, its output normalised by `post_norm` where given; returns (x, router
    logits or None)."""
    y = fn(norm(x) if pre_norm else x)
    router_logits = None
    if isinstance(y, tuple):  # an MoE feed-forward
        y, router_logits = y
    if post_norm is not None:
        y = post_norm(y)
    x = clamp_fp16(x + dropout(y))  # a half-precision model stays finite (modules/fp16.py)
    return (x if pre_norm else norm(x)), router_logits


def _attend(attn: Attention, inputs: AttentionInputs, source=None, cache=None):
    def fn(h):
        return attn(h, source, inputs, cache)

    return fn


def post_norm(make_norm, post_norms: bool) -> nn.Module | None:
    """A norm of a sublayer's output (Gemma 2's post-sublayer norms), or None."""
    return make_norm() if post_norms else None


class EncoderBlock(nn.Module):
    def __init__(
        self,
        self_attn: Attention,
        ffn: nn.Module,
        make_norm,
        dropout: float,
        pre_norm: bool = True,
        post_norms: bool = False,
    ):
        super().__init__()
        self.self_attn = self_attn
        self.self_attn_norm = make_norm()
        self.self_attn_post_norm = post_norm(make_norm, post_norms)
        self.ffn = ffn
        self.ffn_norm = make_norm()
        self.ffn_post_norm = post_norm(make_norm, post_norms)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(
        self, x: torch.Tensor, self_inputs: AttentionInputs, cache=None, real: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, S, C), real (B, S) bool or None (every token real) -> (B, S, C), router logits or None. A cache
        serves causal (decoder-only) stacks; `real` tells an MoE's router the padding."""
        attend = _attend(self.self_attn, self_inputs, cache=cache)
        x, _ = residual(x, attend, self.self_attn_norm, self.dropout, self.pre_norm, self.self_attn_post_norm)
        ffn = partial(self.ffn, real=real) if real is not None and isinstance(self.ffn, MoE) else self.ffn
        return residual(x, ffn, self.ffn_norm, self.dropout, self.pre_norm, self.ffn_post_norm)


class DecoderBlock(nn.Module):
    """Causal self-attention, then cross-attention to `memory`, then feed-forward.

    `cross_first` swaps the first two (the auto-regressive encoder-decoder's ALT order);
    `memory_norm` normalises the memory before its keys and values (the research
    encoder-decoders' per-block encoder_cross_ln).
    """

    def __init__(
        self,
        self_attn: Attention,
        cross_attn: Attention,
        ffn: nn.Module,
        make_norm,
        dropout: float,
        pre_norm: bool = True,
        cross_first: bool = False,
        memory_norm: nn.Module | None = None,
        post_norms: bool = False,
    ):
        super().__init__()
        self.memory_norm = memory_norm
        self.self_attn = self_attn
        self.self_attn_norm = make_norm()
        self.self_attn_post_norm = post_norm(make_norm, post_norms)
        self.cross_attn = cross_attn  # None: merged into self_attn, which reads the memory too (T5Gemma 2)
        self.cross_attn_norm = make_norm() if cross_attn is not None else None
        self.cross_attn_post_norm = post_norm(make_norm, post_norms) if cross_attn is not None else None
        self.ffn = ffn
        self.ffn_norm = make_norm()
        self.ffn_post_norm = post_norm(make_norm, post_norms)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm
        self.cross_first = cross_first

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_inputs: AttentionInputs,
        cross_inputs: AttentionInputs,
        cache: LayerCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, C), memory (B, S, C) -> (B, T, C), router logits or None."""
        if self.memory_norm is not None:
            memory = self.memory_norm(memory)
        if self.cross_attn is None:
            merged_fn = self._merged(memory, self_inputs, cross_inputs, cache)
            x, _ = residual(x, merged_fn, self.self_attn_norm, self.dropout, self.pre_norm, self.self_attn_post_norm)
            return residual(x, self.ffn, self.ffn_norm, self.dropout, self.pre_norm, self.ffn_post_norm)
        self_fn = _attend(self.self_attn, self_inputs, cache=cache and cache.self_attn)
        cross_fn = _attend(self.cross_attn, cross_inputs, memory, cache=cache and cache.cross_attn)
        steps = [
            (cross_fn, self.cross_attn_norm, self.cross_attn_post_norm),
            (self_fn, self.self_attn_norm, self.self_attn_post_norm),
        ]
        for fn, norm, after in steps if self.cross_first else reversed(steps):
            x, _ = residual(x, fn, norm, self.dropout, self.pre_norm, after)
        return residual(x, self.ffn, self.ffn_norm, self.dropout, self.pre_norm, self.ffn_post_norm)

    def memory_kv(self, memory: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values this layer reads the memory (B, S, C) through, for a decode state to keep: the
        cross-attention's, or a merged attention's own projections, unrotated."""
        if self.cross_attn is None:
            return self.self_attn.project_kv(memory, rotate=False)
        return self.cross_attn.project_kv(memory, k_pos)

    def _merged(self, memory, self_inputs: AttentionInputs, cross_inputs: AttentionInputs, cache: LayerCache | None):
        """The merged attention (T5Gemma 2): the queries see their own keys (cached ones included) and the
        memory's in one softmax, under the self mask beside the memory mask; a memory row shared by G query rows
        (beams) is read by them together, not repeated (`shared_memory_attention`)."""

        def fn(h):
            if cache is not None and cache.cross_attn.frozen:
                keys, values = cache.cross_attn.keys, cache.cross_attn.values
            else:
                keys, values = self.self_attn.project_kv(memory, rotate=False)  # (M, K, S, D)
            groups, mask, readers = cross_inputs.query_groups, cross_inputs.mask, cross_inputs.memory_readers
            if readers is not None:  # memory rows shared unevenly (a running batch): each row's gathered, this step
                memory_rows = readers.memory_of_row
                keys, values = keys.index_select(0, memory_rows), values.index_select(0, memory_rows)
                mask, groups = (mask.index_select(0, memory_rows) if mask is not None else None), 1
            if groups > 1:
                return shared_memory_attention(self.self_attn, h, self_inputs, cache.self_attn, keys, values, mask)
            merged = replace(self_inputs, extra_kv=(keys, values), extra_mask=mask)
            return self.self_attn(h, None, merged, cache and cache.self_attn)

        return fn


def shared_memory_attention(
    attn: Attention, h, inputs: AttentionInputs, cache, keys, values, memory_mask
) -> torch.Tensor:
    """A merged attention's step (T5Gemma 2's) whose G = R / M query rows (an example's beams) share each memory
    row: h (R, t, C), its keys appended to `cache`; the memory's keys and values (M, K, S, D) under memory_mask
    (M, 1, 1, S) or None -> (R, t, C). One softmax over the own scores and the memory's, the memory's scored
    with each memory row's G rows of queries together (as cross-attention's query groups read it), so no key
    or value is repeated per beam: the scores and probabilities (R, H, t, S) are laid out per row instead."""
    R, T, _ = h.shape
    q = attn.queries(h, inputs.q_pos)  # (R, H, T, D)
    k, v = cache.append(*attn.project_kv(h, inputs.k_pos))  # (R, K, W, D)
    (M, K, S, D), H, W = keys.shape, q.shape[1], k.shape[2]
    G = R // M
    grouped = q.view(M, G, H, T, D).transpose(1, 2).reshape(M, H, G * T, D)
    shared = attention_scores(grouped, keys, memory_mask, False, attn.scale, attn.softcap)  # (M, H, G*T, S)
    shared = shared.view(M, H, G, T, S).transpose(1, 2).reshape(R, H, T, S)
    own = attention_scores(q, k, inputs.mask, inputs.is_causal, attn.scale, attn.softcap)  # (R, H, T, W)
    probs = softmax(torch.cat([own, shared], dim=-1), attn.softcap)  # (R, H, T, W + S)
    if attn.recorded is not None:
        attn.recorded.append(probs.detach())
    out = (probs[..., :W].reshape(R, K, H // K * T, W) @ v).view(R, H, T, D)
    read = probs[..., W:].reshape(M, G, H, T, S).transpose(1, 2).reshape(M, K, H // K * G * T, S) @ values
    out = out + read.view(M, H, G, T, D).transpose(1, 2).reshape(R, H, T, D)
    return attn.project_heads(out, R, T, 1)
