"""A layer's attention through FlexAttention (torch.nn.attention.flex_attention): the mask as a `mask_mod` over
indices, made once a batch into a block mask (`create_block_mask`: blocks of 128 x 128 no query sees are skipped),
and the position terms as a `score_mod` that reads each score's bias from its table by index. Nothing of (B, H, T,
S) is built for the mask or the bias, forward or backward: T5's relative bias (and UMT5's, a layer's own) is one
lookup of its (buckets x heads) table a score, ALiBi one product.

    FlexBatch       what a batch allows, per index: a key's padding (key_real[b, k]), or a packed batch's
                    segments (a query sees the keys of its own segment, never padding)
    ExtraKeys       keys after a layer's own S (LongT5's transient-global blocks, Longformer's global tokens, a
                    merged attention's memory): which a query sees and their score term, by index
    FlexMask        one layer's: its kinds' rules and scores (modules.attention_kinds: the very `rule` and `score`
                    the dense masks fold) on top of the batch's, and its extra keys; Attention reads it from
                    AttentionInputs.flex and attends through `attend`

The dense path (modules.attention.attend) stays where FlexAttention has nothing to add: a decode step's few
queries, a causal layer without a mask (SDPA's mask-free causal kernel), and attention dropout in training, which
FlexAttention cannot apply to the probabilities. `implementation` (model.attention.implementation) picks it: auto
takes FlexAttention on CUDA for every whole-sequence attention with a mask or a bias and the dense and chunked
paths elsewhere; flex asks for it on any device. On CUDA the kernel is torch.compile's (fused, block-sparse); on
the CPU it runs eagerly (its unfused reference, which builds the scores a call) and forward only (torch has no
CPU backward for it): it is there to check, not to be fast.

A query that sees no key (a packed batch's padding rows) comes out zero, where the dense path spreads it evenly
over the keys: rows no loss or later layer reads.

Shapes: B batch, H heads, T queries, S own keys, G extra keys, D head dim.
"""

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from encdec.errors import ConfigError
from encdec.modules.attention import additive_mask
from encdec.modules.attention_kinds.kind import AttentionKind, ExtraKeys, LayerKinds, mask_mod, score_mod
from encdec.modules.attention_kinds.masked import only_causal

IMPLEMENTATIONS = ("auto", "dense", "flex")


def uses_flex(
    implementation: str, device: torch.device, kinds: LayerKinds, masked: bool, drops: bool, backward: bool = False
) -> bool:
    """Whether a whole-sequence attention of `kinds` on `device` takes FlexAttention: `implementation` flex
    always, dense never, auto on CUDA where the layer is masked (its kinds' rules or bias, or a batch's padding
    or packing: `masked`) and SDPA's mask-free kernels do not serve it. `drops`: attention dropout in training,
    which FlexAttention cannot apply; `backward`: gradients wanted, which torch's FlexAttention computes on CUDA
    alone (auto keeps the dense path for either; flex refuses them)."""
    if implementation == "dense":
        return False
    if implementation == "flex":
        if drops:
            raise ConfigError(
                "model.attention.implementation flex cannot drop attention probabilities in training; set "
                "model.dropout 0, or implementation auto (the dense path while dropping) or dense"
            )
        if backward and device.type != "cuda":
            raise ConfigError(
                f"model.attention.implementation flex has no backward on {device.type} (torch's FlexAttention "
                "computes gradients on CUDA alone); train with implementation auto or dense"
            )
        return True
    if drops or device.type != "cuda":
        return False
    return masked or (any(kind.masks for kind in kinds) and not only_causal(kinds))


@dataclass(eq=False)
class FlexBatch:
    """What a batch allows, per index: key_real (B, S) bool, False at a padding key; or q_segments (B, T) and
    k_segments (B, S), a packed batch's examples (1, 2, ...; 0 at padding): a query sees the keys of its own.
    Neither: every key."""

    key_real: torch.Tensor | None = None
    q_segments: torch.Tensor | None = None
    k_segments: torch.Tensor | None = None

    @property
    def batch(self) -> int | None:
        """The batch the mask varies over; None: one mask for every row."""
        held = self.key_real if self.key_real is not None else self.k_segments
        return None if held is None else held.shape[0]

    def allows(self, b, q, k):
        if self.k_segments is not None:
            segment = self.k_segments[b, k]
            return (self.q_segments[b, q] == segment) & (segment > 0)
        if self.key_real is not None:
            return self.key_real[b, k]
        return q >= 0


EVERY_KEY = FlexBatch()


@dataclass(eq=False)
class FlexMask:
    """One layer's mask and position terms for FlexAttention, over T queries and S own keys (and `extra`'s after
    them): the block mask is made on first use and kept in `made`, which the layers of one batch share (one
    extra-key rule among them)."""

    kinds: LayerKinds
    batch: FlexBatch
    T: int
    S: int
    extra: ExtraKeys | None = None
    made: dict = field(default_factory=dict)

    def with_extra(self) -> tuple[Callable, Callable]:
        """The mask_mod and score_mod over the own keys (the batch's allowance and the kinds' rules and scores:
        modules.attention_kinds.mask_mod, score_mod) and the extra ones after them."""
        batch, kinds_rule, kinds_score = self.batch, mask_mod(self.kinds), score_mod(self.kinds)

        def allowed(b, h, q, k):
            return batch.allows(b, q, k) & kinds_rule(b, h, q, k)

        if self.extra is None:
            return allowed, kinds_score
        extra, S = self.extra, self.S

        def masked(b, h, q, k):
            own, g = k.clamp(max=S - 1), (k - S).clamp(min=0)
            seen = allowed(b, h, q, own)
            if extra.own is not None:
                seen = seen & extra.own(b, own)
            return torch.where(k < S, seen, extra.sees(b, q, g))

        def scored(score, b, h, q, k):
            own, g = k.clamp(max=S - 1), (k - S).clamp(min=0)
            extra_score = extra.score(score, b, h, q, g) if extra.score is not None else score
            return torch.where(k < S, kinds_score(score, b, h, q, own), extra_score)

        return masked, scored

    def block_mask(self, device: torch.device) -> BlockMask:
        """The block mask of the batch, the kinds' rules and the extra keys, made once for every FlexMask that
        shares `made` and the same rules (UMT5's layers, a table each and one mask)."""
        rules = tuple(kind for kind in self.kinds if type(kind).rule is not AttentionKind.rule)
        key = (device, rules, self.extra is not None)
        if key not in self.made:
            mask_mod, _ = self.with_extra()
            keys = self.S + (self.extra.count if self.extra is not None else 0)
            rows = self.batch.batch if self.batch.batch is not None or self.extra is None else self.extra.rows
            self.made[key] = create_block_mask(mask_mod, rows, None, self.T, keys, device=device)
        return self.made[key]

    def attend(self, q, k, v, scale: float | None, softcap: float | None = None) -> torch.Tensor:
        """q (B, H, T, D), k and v (B, K, S (+ G), D) -> (B, H, T, D): softmax(q k^T * scale, capped by `softcap`,
        plus the kinds' terms, under the mask) v."""
        _, scored = self.with_extra()
        if softcap is not None:
            uncapped = scored

            def scored(score, b, h, q_idx, k_idx):
                return uncapped(torch.tanh(score / softcap) * softcap, b, h, q_idx, k_idx)

        gqa = k.shape[1] != q.shape[1]
        block_mask = self.block_mask(q.device)
        if torch.compiler.is_compiling():  # a compiled model's: its graph's kernel
            return flex_attention(q, k, v, score_mod=scored, block_mask=block_mask, scale=scale, enable_gqa=gqa)
        if q.device.type in COMPILED_ON:
            return compiled_flex()(q, k, v, score_mod=scored, block_mask=block_mask, scale=scale, enable_gqa=gqa)
        with warnings.catch_warnings():  # eager FlexAttention warns that it is unfused: on the CPU, as meant
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return flex_attention(q, k, v, score_mod=scored, block_mask=block_mask, scale=scale, enable_gqa=gqa)

    def dense(self, B: int, H: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The same mask and terms as one additive mask (B, H, T, S + G), the mod functions called on broadcast
        indices: what a call records of its probabilities (Attention.recorded)."""
        keys = self.S + (self.extra.count if self.extra is not None else 0)
        b, h, q, k = (
            torch.arange(n, device=device).view([-1 if i == d else 1 for i in range(4)])
            for d, n in enumerate((B, H, self.T, keys))
        )
        masked, scored = self.with_extra()
        bias = scored(torch.zeros((), dtype=dtype, device=device), b, h, q, k)
        return additive_mask(masked(b, h, q, k).expand(B, H, self.T, keys), bias.expand(B, H, self.T, keys), dtype)


COMPILED_ON = {"cuda"}  # the devices whose eager calls take the compiled kernel (the CPU's runs eagerly: to check)
COMPILED: list[Callable] = []


def compiled_flex() -> Callable:
    """flex_attention compiled once a process (its fused kernel; eager it builds the scores): a new length
    compiles it once more, for lengths of any size (torch.compile's automatic dynamic shapes)."""
    if not COMPILED:
        COMPILED.append(torch.compile(flex_attention))
    return COMPILED[0]
