"""One attention module for self- and cross-attention: MHA, GQA and MQA.

Everything position- or mask-related arrives as plain arguments, so the same module serves T5 (additive relative
bias, no 1/sqrt(D) scaling), ROT5 (RoPE, grouped-query), Vaswani (sinusoidal, scaled) and the causal
cross-attention of the auto-regressive encoder-decoder. The compute path is torch's `scaled_dot_product_attention`
(CPU training takes an explicit equivalent, see `attend`); grouped KV heads are repeated at use. LongT5's
transient-global attention adds keys of each block's summed inputs (`global_norm`, modules.transient_global);
Longformer's global tokens (LED's) are keys beside a band and attend by projections of their own (`global_q`,
modules.global_tokens); T5Gemma 2's decoder attends to its own keys and the encoder's in one softmax (`extra_kv`),
each head's queries and keys normed first (`q_norm`, `k_norm`, Gemma 3's and Qwen3's). `bias` puts a bias on every
projection, `qkv_bias` on q, k and v where it differs (Qwen2's), `k_bias` on k where that differs (Whisper's
none). Setting `recorded` to a list makes every call append its attention probabilities there (encdec.inspection
reads them).

Shapes: B batch, T query length, S key length, C model dim,
H query heads, K kv heads (H % K == 0), D head dim.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from encdec.modules.chunked_attention import LazyMask, chunked_attend
from encdec.modules.decoding_linear import decoding_linear
from encdec.modules.dropout import dropout
from encdec.modules.global_tokens import GlobalTokenRows
from encdec.modules.kv_cache import StaticKVCache
from encdec.modules.positions import RotaryEmbedding
from encdec.modules.transient_global import TransientGlobals, block_sums

# CPU training keeps three (B, H, T, S) float tensors an attention for its backward (the softmax, the
# dropout mask, the dropped probabilities): 8.6 GB at batch 32 x 512 source tokens x 8 heads x 4 layers
# against 3.0 GB without dropout. From this many scores up, they are recomputed in the backward instead.
RECOMPUTE_SCORES = 1 << 24


@dataclass
class MemoryReaders:
    """The rows (B) of a running batch over M memory rows shared unevenly (encdec.modules.running_batch): each
    memory row's first row (`first` (M,): the row that reads memory row m) attends in one pass of one query
    row per memory row; the other rows (`others` (B - M,)) in a second, folded as query groups of G slots
    over the memory rows that have such rows (`shared` (Ms,); None: all M), at `slots` (B - M,) of Ms * G.
    No memory row is copied per row; the queries are padded only within the memory rows shared."""

    first: torch.Tensor  # (M,) rows
    memory_of_row: torch.Tensor  # (B,) each row's memory row
    others: torch.Tensor | None = None  # (B - M,) rows; None: every memory row read by one row
    shared: torch.Tensor | None = None  # (Ms,) memory rows the others read; None: all M
    slots: torch.Tensor | None = None  # (B - M,) each other row's slot among Ms * G
    groups: int = 1  # G

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys_t, mask, core) -> torch.Tensor:
        """q (B, H, T, D) in row order, the memory's k, v (M, K, S, D), keys_t (M, K, D, S) or None, mask
        (M, 1, 1, S) or None; core(q, k, v, keys_t, mask) one attention of matching rows -> (B, H, T, D)."""
        out = torch.empty_like(q)
        out[self.first] = core(q[self.first], k, v, keys_t, mask)
        if self.others is None:
            return out
        if self.shared is not None:  # the few memory rows with more than one row, this pass's
            pick = self.shared
            k, v, mask = k[pick], v[pick], mask[pick] if mask is not None else None
            keys_t = keys_t[pick] if keys_t is not None else None
        (_, H, T, D), G, Ms = q.shape, self.groups, k.shape[0]
        folded = q.new_zeros(Ms * G, H, T, D).index_copy_(0, self.slots, q[self.others])
        folded = folded.view(Ms, G, H, T, D).transpose(1, 2).reshape(Ms, H, G * T, D)
        grouped = core(folded, k, v, keys_t, mask).view(Ms, H, G, T, D).transpose(1, 2).reshape(Ms * G, H, T, D)
        out[self.others] = grouped.index_select(0, self.slots)
        return out


@dataclass
class AttentionInputs:
    """What one attention call reads besides its queries' and keys' states.

    mask: additive float (or boolean, True = attend) broadcastable to (B, H, T, S), covering all keys including
        cached ones; it carries padding, causality and any additive position bias (modules.attention_kinds makes
        it from a layer's declared kinds). A LazyMask (long inputs) makes it by rows of queries, which are then
        attended a chunk at a time. `is_causal` is the mask-free causal fast path (T == S, no cache).
    q_pos, k_pos: positions for RoPE, (T,) / (S,) or per example (B, T) / (B, S).
    query_groups: G > 1 when each G consecutive rows of queries share one row of keys (the beams of one example
        over its encoder output): their queries are folded into the query length, so shared keys are neither
        copied nor reordered.
    memory_readers: where rows share memory rows unevenly (a running batch of requests of different `n`): which
        rows read which memory row (MemoryReaders), each memory row read once for all its rows.
    global_keys: a transient-global self-attention's blocks (LongT5's), whose block sums, normed, are keys and
        values after the S local ones (the mask covers both).
    global_tokens: Longformer's global tokens (modules.global_tokens): keys after the S own (the mask covers both).
    extra_kv: keys and values (B, K, S2, D) attended beside the own ones in one softmax, under `extra_mask`
        (additive, broadcastable to (B, H, T, S2); None: all seen): a merged attention's encoder keys.
    flex: the mask and position terms as FlexAttention reads them (modules.flex_attention.FlexMask, in place of
        `mask` and the extra masks): the call attends through it.
    """

    mask: torch.Tensor | LazyMask | None = None
    is_causal: bool = False
    q_pos: torch.Tensor | None = None
    k_pos: torch.Tensor | None = None
    query_groups: int = 1
    memory_readers: MemoryReaders | None = None
    global_keys: TransientGlobals | None = None
    global_tokens: GlobalTokenRows | None = None
    extra_kv: tuple[torch.Tensor, torch.Tensor] | None = None
    extra_mask: torch.Tensor | None = None
    flex: "FlexMask | None" = None  # noqa: F821 (modules.flex_attention, which imports this module)


NO_INPUTS = AttentionInputs()


class Attention(nn.Module):
    """Multi-head attention from `d_model` queries to `d_source` keys and values."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        d_head: int | None = None,
        d_source: int | None = None,
        bias: bool = False,
        scale: bool = True,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
        scale_dim: int | None = None,
        softcap: float | None = None,
        global_norm: nn.Module | None = None,
        qk_norm=None,
        qkv_bias: bool | None = None,
        global_tokens: bool = False,
        k_bias: bool | None = None,
    ):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        self.d_head = d_head or d_model // n_heads
        if n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        d_source = d_source or d_model
        qkv_bias = bias if qkv_bias is None else qkv_bias  # q, k and v biased, o not: Qwen2's
        self.q = nn.Linear(d_model, n_heads * self.d_head, bias=qkv_bias)
        k_bias = qkv_bias if k_bias is None else k_bias  # Whisper's keys alone unbiased (the softmax cancels it)
        self.k = nn.Linear(d_source, self.n_kv_heads * self.d_head, bias=k_bias)
        self.v = nn.Linear(d_source, self.n_kv_heads * self.d_head, bias=qkv_bias)
        self.o = nn.Linear(n_heads * self.d_head, d_model, bias=bias)
        # None: SDPA's default 1/sqrt(D); scale_dim: 1/sqrt(scale_dim) instead (Gemma's query_pre_attn_scalar)
        self.scale = (scale_dim**-0.5 if scale_dim else None) if scale else 1.0
        self.softcap = softcap  # scores capped softcap * tanh(s / softcap) before the mask (Gemma 2); None: not
        self.dropout = dropout
        self.rotary = rotary
        self.global_norm = global_norm  # a transient-global attention's norm of the block sums (LongT5's)
        # qk_norm: a function making a norm of d_head, or None; each head's queries and keys normed before RoPE
        self.q_norm = qk_norm(self.d_head) if qk_norm else None
        self.k_norm = qk_norm(self.d_head) if qk_norm else None
        own = (nn.Linear(d_model, n_heads * self.d_head, bias=qkv_bias) for _ in range(3)) if global_tokens else None
        self.global_q, self.global_k, self.global_v = own or (None, None, None)  # Longformer's query_global, ...
        # None, or a list each call appends its probabilities to, (B, H, T, S) (or (B/G, H, G*T, S) with query
        # groups): softmax(scores) from the very q, k, mask and scale the call attends with. Off, the cost is
        # one attribute check per call.
        self.recorded: list[torch.Tensor] | None = None

    def project_kv(self, source: torch.Tensor, k_pos: torch.Tensor | None = None, rotate: bool = True):
        """source (B, S, C) -> keys, values (B, K, S, D), keys normed (qk norm) and rotated by `k_pos` (not with
        `rotate` false: the encoder's keys of a merged attention)."""
        B, S, _ = source.shape
        k = project(self.k, source).view(B, S, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, K, S, D)
        v = project(self.v, source).view(B, S, self.n_kv_heads, self.d_head).transpose(1, 2)
        if self.k_norm is not None:
            k = self.k_norm(k)
        if self.rotary is not None and rotate:
            k = self.rotary(k, k_pos)
        return k, v

    def queries(self, x: torch.Tensor, q_pos: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C) -> queries (B, H, T, D), normed (qk norm) and rotated by q_pos."""
        B, T, _ = x.shape
        q = project(self.q, x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, D)
        if self.q_norm is not None:
            q = self.q_norm(q)
        return q if self.rotary is None else self.rotary(q, q_pos)

    def forward(
        self,
        x: torch.Tensor,
        source: torch.Tensor | None = None,
        inputs: AttentionInputs | None = None,
        cache=None,
    ) -> torch.Tensor:
        """Attend from x (B, T, C) to `source` (B, S, C_src), or to x itself when None, with `inputs` (masks,
        positions, extra keys: see AttentionInputs; None: every key seen, no positions).

        cache: appended to (a SelfAttentionCache: the keys a step reads come back) or filled once and reused (a
            frozen StaticKVCache).
        """
        inputs = inputs if inputs is not None else NO_INPUTS
        mask, is_causal, groups = inputs.mask, inputs.is_causal, inputs.query_groups
        B, T, _ = x.shape
        dropout_p = self.dropout if self.training else 0.0
        q = self.queries(x, inputs.q_pos)  # (B, H, T, D)
        if cache is not None and cache.frozen:
            k, v = cache.keys, cache.values
        else:
            k, v = self.project_kv(x if source is None else source, inputs.k_pos)  # (B, K, S, D)
            if cache is not None:
                k, v = cache.append(k, v)
        if inputs.global_keys is not None:
            globals_ = inputs.global_keys
            global_k, global_v = self.project_kv(self.global_norm(block_sums(x, globals_.blocks, globals_.count)))
            k, v = torch.cat([k, global_k], dim=2), torch.cat([v, global_v], dim=2)  # (B, K, S + G, D)
        if inputs.global_tokens is not None:  # Longformer's global tokens, keys by the layer's own projections
            k, v = inputs.global_tokens.keys(k), inputs.global_tokens.keys(v)  # (B, K, S + G, D)
        if inputs.extra_kv is not None:
            extra_k, extra_v = inputs.extra_kv
            if inputs.flex is None:  # a FlexMask holds the memory's keys as its extra ones
                mask = joined_mask(
                    mask, is_causal, inputs.extra_mask, T, k.shape[2], extra_k.shape[2], x.dtype, x.device
                )
            k, v = torch.cat([k, extra_k], dim=2), torch.cat([v, extra_v], dim=2)
            is_causal = False
        if inputs.memory_readers is not None:  # a running batch's rows over memory rows shared unevenly
            keys_t = cache.keys_t if isinstance(cache, StaticKVCache) else None

            def core(q, k, v, keys_t, mask):
                if keys_t is not None and few_queries_on_cpu(q, mask, self.training):
                    return attend_transposed(q, keys_t, v, mask, self.scale, self.softcap)
                return attend(q, k, v, mask, False, self.scale, dropout_p, self.softcap)

            out = inputs.memory_readers.attend(q, k, v, keys_t, mask, core)
            return self.project_heads(out, B, T, 1)
        if groups > 1:  # (B, H, T, D) -> (B/G, H, G*T, D)
            q = q.view(B // groups, groups, self.n_heads, T, self.d_head).transpose(1, 2)
            q = q.reshape(B // groups, self.n_heads, groups * T, self.d_head)
        if inputs.flex is not None:  # FlexAttention (modules.flex_attention)
            mask = inputs.flex.dense(*q.shape[:2], x.dtype, q.device) if self.recorded is not None else None
            out = inputs.flex.attend(q, k, v, self.scale, self.softcap)
        elif isinstance(mask, LazyMask):  # long scores: a chunk of queries at a time (modules.chunked_attention)
            out = chunked_attend(attend, q, k, v, mask, self.scale, dropout_p, self.softcap)
        elif isinstance(cache, StaticKVCache) and few_queries_on_cpu(q, mask, self.training):
            out = attend_transposed(q, cache.keys_t, v, mask, self.scale, self.softcap)
        else:
            out = attend(q, k, v, mask, is_causal and mask is None, self.scale, dropout_p, self.softcap)
        if self.recorded is not None:
            whole = mask.dense() if isinstance(mask, LazyMask) else mask
            self.recorded.append(attention_probs(q, k, whole, is_causal and mask is None, self.scale, self.softcap))
        if inputs.global_tokens is not None:  # each global token's output its own attention's (Longformer's)
            q, k, v, real = inputs.global_tokens.heads(x, (self.global_q, self.global_k, self.global_v), self.n_heads)
            rows = attend(q, k, v, additive_mask(real, None, x.dtype), False, self.scale, dropout_p, self.softcap)
            out = inputs.global_tokens.replace(out, rows)
        return self.project_heads(out, B, T, groups)

    def project_heads(self, out: torch.Tensor, B: int, T: int, query_groups: int) -> torch.Tensor:
        """out (B, H, T, D), or (B/G, H, G*T, D) with query groups -> the output projection (B, T, C)."""
        if query_groups > 1:  # (B/G, H, G, T, D) -> (B/G, G, T, H, D)
            out = out.view(B // query_groups, self.n_heads, query_groups, T, self.d_head).permute(0, 2, 3, 1, 4)
        else:
            out = out.transpose(1, 2)  # (B, T, H, D)
        return project(self.o, out.reshape(B, T, self.n_heads * self.d_head))


def joined_mask(
    mask: torch.Tensor | None,
    is_causal: bool,
    extra: torch.Tensor | None,
    T: int,
    width: int,
    extra_width: int,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """One additive mask over a query's own keys (`mask`, or causal, or none: all seen; the last `T` of `width`
    keys are the queries') and then `extra_width` extra keys (`extra`, None: all seen): (B or 1, H or 1, T,
    width + extra_width)."""
    if mask is None:
        allowed = causal_mask(T, width, width - T, device) if is_causal else None
        mask = (
            additive_mask(allowed, None, dtype)
            if allowed is not None
            else torch.zeros(1, 1, 1, width, dtype=dtype, device=device)
        )
    if extra is None:
        extra = torch.zeros(1, 1, 1, extra_width, dtype=dtype, device=device)
    mask = mask.view((1,) * (4 - mask.dim()) + tuple(mask.shape))
    rows, heads = max(mask.shape[0], extra.shape[0]), max(mask.shape[1], extra.shape[1])
    return torch.cat([mask.expand(rows, heads, T, width), extra.expand(rows, heads, T, extra_width)], dim=-1)


def project(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """layer(x), through `decoding_linear` (oneDNN for inference on CPU) when `layer` is a plain nn.Linear;
    any other module (a quantised or adapted projection) is called as it is."""
    if type(layer) is nn.Linear:
        return decoding_linear(x, layer.weight, layer.bias)
    return layer(x)


FEW_QUERIES = 16  # rows of queries per row of keys at or below which a frozen cache is read transposed


def few_queries_on_cpu(q: torch.Tensor, mask: torch.Tensor | None, training: bool) -> bool:
    """Whether `attend_transposed` serves q (B, H, T, D) against a filled static cache: a decoding step's
    few queries, on CPU, in inference, with no mask or an additive one."""
    no_grad = not torch.is_grad_enabled() or not q.requires_grad
    additive = mask is None or mask.is_floating_point()
    return q.device.type == "cpu" and not training and no_grad and additive and q.shape[2] <= FEW_QUERIES


def attend_transposed(q, keys_t, v, mask, scale: float | None, softcap: float | None = None) -> torch.Tensor:
    """q (B, H, T, D), keys_t (B, K, D, S) (a static cache's, see StaticKVCache for its layouts), v (B, K, S, D),
    an additive mask -> (B, H, T, D).

    softmax(q keys_t * scale + mask) v as two batched products over memory laid out for them; for a
    step's few queries on CPU this is faster than SDPA, whose kernel blocks over many queries.
    """
    B, H, T, D = q.shape
    K, S = keys_t.shape[1], keys_t.shape[-1]
    scores = (q.reshape(B, K, H // K * T, D) @ keys_t).view(B, H, T, S)  # (B, H, T, S)
    if scale != 1.0:
        scores = scores * (D**-0.5 if scale is None else scale)
    if softcap is not None:
        scores = soft_cap(scores, softcap)
    if mask is not None:
        scores = scores + mask
    return (softmax(scores, softcap).view(B, K, H // K * T, S) @ v).view(B, H, T, D)


def attend(
    q,
    k,
    v,
    mask,
    is_causal: bool,
    scale: float | None,
    dropout_p: float,
    softcap: float | None = None,
    recompute: bool = True,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v with K kv heads serving H query heads: (B, H, T, D).

    torch's SDPA, whose fused kernels serve inference and mask-free training. In
    CPU training with dropout, or with a mask that needs a gradient (T5's learned
    bias), SDPA falls back to its math path with Bernoulli dropout; the explicit
    path here computes the same thing with cheap dropout masks, grouping query heads
    per KV head instead of repeating keys. It also serves a compiled decoding step's few
    queries on CPU, which inductor fuses: SDPA's CPU kernel over a fixed-shape step's
    whole buffer took 150 us a call against about 55 us in the eager step. SDPA cannot cap scores
    (`softcap`, Gemma 2's), so a capped attention takes the explicit path everywhere.
    """
    needs_grad = mask is not None and mask.requires_grad
    compiled_step = torch.compiler.is_compiling() and q.shape[2] <= FEW_QUERIES  # see below
    if softcap is None and (q.device.type != "cpu" or not (dropout_p > 0 or needs_grad or compiled_step)):
        gqa = k.shape[1] != q.shape[1]
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=gqa
        )
    if recompute and torch.is_grad_enabled() and q.numel() // q.shape[-1] * k.shape[2] >= RECOMPUTE_SCORES:
        return checkpoint(explicit_attention, q, k, v, mask, is_causal, scale, dropout_p, softcap, use_reentrant=False)
    return explicit_attention(q, k, v, mask, is_causal, scale, dropout_p, softcap)


def explicit_attention(
    q, k, v, mask, is_causal: bool, scale: float | None, dropout_p: float, softcap: float | None = None
) -> torch.Tensor:
    """attend's CPU training path (and every capped attention's): the scores, their softmax and its dropout as
    tensors of (B, H, T, S)."""
    B, H, T, D = q.shape
    K, S = k.shape[1], k.shape[2]
    probs = dropout(softmax(attention_scores(q, k, mask, is_causal, scale, softcap), softcap), dropout_p)
    return (probs.view(B, K, H // K * T, S) @ v).view(B, H, T, D)


def attention_scores(q, k, mask, is_causal: bool, scale: float | None, softcap: float | None = None) -> torch.Tensor:
    """q (B, H, T, D), k (B, K, S, D) -> q k^T * scale (capped by `softcap`) + mask (B, H, T, S): query head h
    reads KV head h // (H / K), as SDPA's enable_gqa repeats them, with the query heads grouped per KV head
    instead."""
    B, H, T, D = q.shape
    K, S = k.shape[1], k.shape[2]
    scores = q.reshape(B, K, H // K * T, D) @ k.transpose(-1, -2)  # (B, K, G*T, S), G = H / K
    scores = scores.view(B, H, T, S)
    if scale != 1.0:
        scores = scores * (D**-0.5 if scale is None else scale)
    if softcap is not None:
        scores = soft_cap(scores, softcap)
    if is_causal:
        mask = additive_mask(causal_mask(T, S, S - T, q.device), None, q.dtype)
    if mask is not None:
        scores = scores + mask
    return scores


def softmax(scores: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """The scores' softmax over keys, in their dtype; a capped attention's in float32 and then cast, as Gemma 2
    computes it."""
    if softcap is None:
        return scores.softmax(dim=-1)
    return scores.softmax(dim=-1, dtype=torch.float32).to(scores.dtype)


def soft_cap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(x / cap): x kept within (-cap, cap), near unchanged well inside (Gemma 2's scores, logits)."""
    return torch.tanh(x / cap) * cap


def attention_probs(q, k, mask, is_causal: bool, scale: float | None, softcap: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale + mask) (B, H, T, S), detached, in q's dtype: the probabilities the explicit path
    computes (before dropout) and SDPA's kernels compute without keeping them; what `Attention.recorded`
    collects. A boolean mask (True = attend) is made additive first."""
    if mask is not None and mask.dtype == torch.bool:
        mask = additive_mask(mask, None, q.dtype)
    return attention_scores(q, k, mask, is_causal, scale, softcap).softmax(dim=-1).detach()


def causal_mask(T: int, S: int, offset: int = 0, device=None) -> torch.Tensor:
    """(T, S) boolean, True where query t (at absolute position offset + t) may see key s <= offset + t."""
    q = torch.arange(T, device=device)[:, None] + offset
    return torch.arange(S, device=device)[None, :] <= q


def additive_mask(allowed: torch.Tensor | None, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Fold a boolean `allowed` mask into an additive float mask, on top of `bias`.

    Blocked entries get `blocked_value` rather than -inf, so a row with every key
    blocked gives a finite (uniform) result, not NaN, also after autocast casts it.
    """
    if allowed is None:
        return bias
    blocked = blocked_value(dtype, allowed.device.type)
    if bias is None:
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, blocked)
    shape = broadcast_shape(allowed.shape, bias.shape)
    return bias.to(dtype).expand(shape).masked_fill(~allowed, blocked)


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape `a` and `b` broadcast to, as torch.broadcast_shapes gives it, without its import of torch.fx's
    symbolic shapes (2.5 s on a process's first call, which decoding paid); a mismatch is torch's error."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    shape = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"shapes {a} and {b} do not broadcast")
        shape.append(y if x == 1 else x)
    return tuple(shape)


def blocked_value(dtype: torch.dtype, device_type: str) -> float:
    """The additive score of a blocked key: the most negative number finite in `dtype`
    and, while autocast is on for `device_type`, in the autocast dtype too.

    CUDA autocast casts SDPA's inputs, an fp32 mask included, to bf16, where fp32's
    min rounds to -inf. bf16's min is exact in fp32, and a score added to it in fp32
    rounds back to it as it does to fp32's min, so results keep their bits.
    """
    value = torch.finfo(dtype).min
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        value = max(value, torch.finfo(torch.get_autocast_dtype(device_type)).min)
    return value
