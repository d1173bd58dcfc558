"""Attention whose memory grows linearly with the input: the queries taken a chunk of rows at a time, each
chunk's mask made only for its rows, and in training each chunk recomputed in the backward pass.

A (B, H, T, S) score tensor at T = S = 16,384 and 8 heads is 8 GiB in float32, and training keeps several
(the softmax, the dropout mask, the bias's gradient). Softmax is taken over keys, row by row, so the rows of a
chunk of queries need nothing of the other rows: `chunked_attend` computes them `attend`'s way (SDPA or the
explicit path, the same arithmetic as the whole), keeps only their outputs (B, H, rows, D) and, where autograd
records, wraps each chunk in a non-reentrant checkpoint, so the backward pass recomputes one chunk's scores
at a time (its dropout mask too: the checkpoint restores the random state). At most CHUNK_SCORES numbers of
scores exist at once. A `LazyMask` is a mask by rows: what makes the part a chunk reads (padding, packing,
windows, relative biases, whose gradients reach their tables through the recomputation).

On the CPU each chunk's transient memory goes back to the system after it (`release_freed`): glibc's malloc
keeps freed blocks of up to 32 MiB in its heap, and the chunks' scores, interleaved with what the pass keeps,
fragment it, so that a t5-small training step at 16,384 tokens peaked at 6.2 GiB resident against about
1 GiB of live tensors.

FlexAttention would fuse the same work on a GPU, but has no backward pass on the CPU (torch 2.13:
"FlexAttention does not support backward on CPU"), where this project trains; this path runs on every device.

Shapes: B batch, H heads, K kv heads, T queries, S keys, D head dim.
"""

import ctypes
import ctypes.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_SCORES = 1 << 23  # 8M numbers of scores a chunk holds at most (32 MiB in float32)


def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


MALLOC_TRIM = _malloc_trim()


def release_freed(device: torch.device) -> None:
    """Give the free pages of the C heap back to the system after a chunk on the CPU (see the module)."""
    if device.type == "cpu" and MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


@dataclass
class LazyMask:
    """An additive mask made by rows of queries: make(t0, t1) -> (B or 1, H or 1, t1 - t0, S), or None (none)."""

    make: Callable[[int, int], torch.Tensor | None]
    rows: int

    def dense(self) -> torch.Tensor | None:
        """The whole mask (what a recording of the probabilities reads)."""
        return self.make(0, self.rows)


def rows_of(mask, t0: int, t1: int) -> torch.Tensor | None:
    """Rows t0..t1 of a mask: a LazyMask's made, a tensor's sliced (one broadcast over queries as it is)."""
    if isinstance(mask, LazyMask):
        return mask.make(t0, t1)
    if mask is None or mask.shape[-2] == 1:
        return mask
    return mask[..., t0:t1, :]


def chunk_rows(q: torch.Tensor, keys: int) -> int:
    """Rows of queries per chunk: as many as keep a chunk's scores within CHUNK_SCORES, at least one."""
    B, H = q.shape[:2]
    return max(1, CHUNK_SCORES // (B * H * keys))


def chunked_attend(attend: Callable, q, k, v, mask, scale, dropout_p: float, softcap) -> torch.Tensor:
    """`attend`(q, k, v, mask, is_causal=False, scale, dropout_p, softcap, recompute=False) (B, H, T, D), a chunk of query rows at
    a time, each recomputed in the backward pass where autograd records: the same result, scores of one chunk at
    a time."""
    T, S = q.shape[2], k.shape[2]
    rows = chunk_rows(q, S)
    outputs = []
    for t0 in range(0, T, rows):
        t1 = min(T, t0 + rows)
        part = partial(_chunk, attend, k=k, v=v, mask=mask, t0=t0, t1=t1, scale=scale, p=dropout_p, cap=softcap)
        if torch.is_grad_enabled():
            outputs.append(checkpoint(part, q[:, :, t0:t1], use_reentrant=False))
        else:
            outputs.append(part(q[:, :, t0:t1]))
    return torch.cat(outputs, dim=2)


def _chunk(attend, q_rows, *, k, v, mask, t0: int, t1: int, scale, p: float, cap) -> torch.Tensor:
    release_freed(q_rows.device)  # the previous chunk's (or, recomputed in the backward pass, its gradients')
    return attend(q_rows, k, v, rows_of(mask, t0, t1), False, scale, p, cap, recompute=False)  # recomputed whole
