"""Attention whose memory grows linearly with the input: the queries taken a chunk of rows at a time, each
chunk's mask made only for its rows, and in training each chunk recomputed in the backward pass.

A (B, H, T, S) score tensor at T = S = 16,384 and 8 heads is 8 GiB in float32, and training keeps several
(the softmax, the dropout mask, the bias's gradient). Softmax is taken over keys, row by row, so the rows of a
chunk of queries need nothing of the other rows: `chunked_attend` computes them `attend`'s way (SDPA or the
explicit path, the same arithmetic as the whole), keeps only their outputs (B, H, rows, D) and, where autograd
records, wraps each chunk in a non-reentrant checkpoint, so the backward pass recomputes one chunk's scores
at a time (its dropout mask too: the checkpoint restores the random state). At most CHUNK_SCORES numbers of
scores exist at once. A `LazyMask` is a mask by rows and keys: what makes the part a chunk reads (padding,
packing, windows, relative biases, whose gradients reach their tables through the recomputation). Where no
query sees a key farther than a band from itself (LongT5's local attention, a sliding window), a chunk reads
only the keys within the band of its rows, so the work too grows linearly with the input; where the layer's
kinds read k - q alone (every kind but Longformer's global tokens) and no cap bounds its scores, the band is
attended by blocks instead (modules.blocked_band: one batched product, its bias laid out once), about 3x
faster than by chunks.

On the CPU each chunk's transient memory goes back to the system after it (`release_freed`): glibc's malloc
keeps freed blocks of up to 32 MiB in its heap, and the chunks' scores, interleaved with what the pass keeps,
fragment it, so that a t5-small training step at 16,384 tokens peaked at 6.2 GiB resident against about
1 GiB of live tensors.

FlexAttention would fuse the same work on a GPU, but has no backward pass on the CPU (torch 2.13:
"FlexAttention does not support backward on CPU"), where this project trains; this path runs on every device.

Shapes: B batch, H heads, K kv heads, T queries, S keys, D head dim.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch.utils.checkpoint import checkpoint

from encdec.modules.blocked_band import BandBlocks, blocked_attend
from encdec.sizing import release_free_memory

CHUNK_SCORES = 1 << 23  # 8M numbers of scores a chunk holds at most (32 MiB in float32)
MIN_BAND_ROWS = 64  # query rows a banded chunk may take however narrow its band (fewer chunks to loop over)


def release_freed(device: torch.device) -> None:
    """Give the free pages of the C heap back to the system after a chunk on the CPU (see the module)."""
    if device.type == "cpu":
        release_free_memory()


@dataclass
class LazyMask:
    """An additive mask made by rows of queries and a range of keys: make(t0, t1, k0, k1) -> (B or 1, H or 1,
    t1 - t0, k1 - k0 + extra) over queries t0..t1, keys k0..k1 of the `rows` own keys and then the `extra` keys
    after them (LongT5's global keys), or None (nothing masked). `band`: no query sees an own key farther than
    this from itself (a local or sliding window), so a chunk of rows reads only the keys within the band of its
    rows; None: every key. `blocks`: the same mask as a band's blocks read it (modules.blocked_band), where the
    layer's kinds allow it: the band is then attended by blocks instead of chunks."""

    make: Callable[[int, int, int, int], torch.Tensor | None]
    rows: int
    band: int | None = None
    extra: int = 0
    blocks: BandBlocks | None = None

    def dense(self) -> torch.Tensor | None:
        """The whole mask (what a recording of the probabilities reads)."""
        return self.make(0, self.rows, 0, self.rows)

    def keys(self, t0: int, t1: int) -> tuple[int, int]:
        """The own keys k0..k1 the query rows t0..t1 may see: within the band of those rows, or all."""
        if self.band is None:
            return 0, self.rows
        return max(0, t0 - self.band), min(self.rows, t1 + self.band)


def chunk_rows(q: torch.Tensor, mask: LazyMask) -> int:
    """Rows of queries per chunk: as many as keep a chunk's scores within CHUNK_SCORES, at least one. A chunk of
    r rows reads at most every key, or r + 2 * band of them, and the extra ones; a banded chunk takes at most
    twice its band's width of rows (MIN_BAND_ROWS at least), so that at most about half of the scores it
    computes are outside the band."""
    return rows_per_chunk(q.shape[0] * q.shape[1], mask.rows, mask.band, mask.extra)


def rows_per_chunk(heads: int, keys: int, band: int | None, extra: int) -> int:
    """`chunk_rows` for `heads` (B x H) score rows of queries over `keys` own keys (`band` and `extra` as a
    LazyMask's)."""
    budget = CHUNK_SCORES // heads
    rows = budget // (keys + extra)
    if band is not None:  # the largest r with r * (r + 2 * band + extra) <= budget, and few keys wasted
        width = 2 * band + extra
        fits = (math.isqrt(width * width + 4 * budget) - width) // 2
        rows = min(fits, max(MIN_BAND_ROWS, 2 * (2 * band + 1)))
    return max(1, rows)


def chunk_scores(heads: int, keys: int, band: int | None, extra: int) -> int:
    """The numbers of scores one chunk of `chunked_attend` holds over `keys` own keys, for `heads` (B x H):
    what a layer that attends by chunks holds at once, whatever the input's length."""
    rows = min(keys, rows_per_chunk(heads, keys, band, extra))
    read = keys if band is None else min(keys, rows + 2 * band)
    return heads * rows * (read + extra)


def chunked_attend(attend: Callable, q, k, v, mask: LazyMask, scale, dropout_p: float, softcap) -> torch.Tensor:
    """`attend`(q, k, v, mask, is_causal=False, scale, dropout_p, softcap, recompute=False) (B, H, T, D), a chunk
    of query rows at a time over the keys its rows may see (`mask.keys`, and the extra ones), each recomputed in
    the backward pass where autograd records: the same result, scores of one chunk at a time. A band with its
    blocks (and no cap on its scores) is attended by blocks instead (modules.blocked_band)."""
    if mask.blocks is not None and softcap is None:
        out = blocked_attend(q, k, v, mask.blocks, scale, dropout_p)
        release_freed(q.device)  # once a layer, not a group: a 16k-token decode's peak 0.68 -> 0.61 GiB
        return out
    T = q.shape[2]
    rows = chunk_rows(q, mask)
    outputs = []
    for t0 in range(0, T, rows):
        t1 = min(T, t0 + rows)
        k0, k1 = mask.keys(t0, t1)
        part = partial(
            _chunk, attend, k=k, v=v, mask=mask, span=(t0, t1, k0, k1), scale=scale, p=dropout_p, cap=softcap
        )
        if torch.is_grad_enabled():
            outputs.append(checkpoint(part, q[:, :, t0:t1], use_reentrant=False))
        else:
            outputs.append(part(q[:, :, t0:t1]))
    return torch.cat(outputs, dim=2)


def _keys(k: torch.Tensor, mask: LazyMask, k0: int, k1: int) -> torch.Tensor:
    """Own keys (or values) k0..k1 and the extra ones after them."""
    if k0 == 0 and k1 == mask.rows:
        return k
    own = k[:, :, k0:k1]
    return own if mask.extra == 0 else torch.cat([own, k[:, :, mask.rows :]], dim=2)


def _chunk(attend, q_rows, *, k, v, mask: LazyMask, span, scale, p: float, cap) -> torch.Tensor:
    release_freed(q_rows.device)  # the previous chunk's (or, recomputed in the backward pass, its gradients')
    t0, t1, k0, k1 = span
    keys, values = _keys(k, mask, k0, k1), _keys(v, mask, k0, k1)
    return attend(q_rows, keys, values, mask.make(t0, t1, k0, k1), False, scale, p, cap, recompute=False)
