"""A band's attention by blocks (LongT5's local attention, a sliding window each side): the queries cut into
blocks of band + 1, each block attending to the keys of its own block and the two beside it, in one batched
product over every block, as transformers' LongT5 computes it.

    block n's queries   rows n * b .. (n + 1) * b - 1, b = band + 1 (the last block padded)
    its keys            rows (n - 1) * b .. (n + 2) * b - 1: every key within the band of each of its queries
    the pattern         what the layer's kinds add and forbid, laid out once for a block (1 or H, b, 3 b): a
                        kind's rule and bias read k - q alone, the same in every block, so T5's bucketed bias is
                        looked up once per forward, not once per chunk and again in its recomputation
    the batch's part    which keys are real (padding, the windows' ends) and, packed, which lie in the query's
                        example: a boolean by window (B, blocks, 1 or b, 3 b)
    global keys         LongT5's transient-global ones: every query's scores over them joined to its window's
                        before the one softmax (their mask by rows of queries, `side`)

Per block the scores hold b x 3b numbers, against a chunk's rows x (rows + 2 x band) on the chunked path, and the
whole layer is a few products instead of a loop. In training, where a layer's scores would exceed GROUP_SCORES,
groups of blocks are recomputed in the backward pass (a non-reentrant checkpoint, the random state restored, so
dropout draws the same mask), so memory stays linear in the input; below it nothing is recomputed.

Shapes: B batch, H heads, K kv heads, T queries (and own keys), D head dim, G global keys, b block.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from encdec.modules.dropout import dropout

GROUP_SCORES = 1 << 21  # numbers of scores a group of blocks holds at most (8 MiB in float32)


@dataclass
class BandBlocks:
    """What a layer's blocks read besides q, k and v (see the module): `size` b, the `pattern` (1 or H, b, 3b)
    additive, `keys` (B or 1, T) nonzero at a real key (a packed batch's segment ids), `queries` (B, T) the query's
    segment where packed (None: a query sees every real key), `blocked` the score of a forbidden key, and `side`:
    side(t0, t1) -> the additive mask of query rows t0..t1 over the G global keys (B, H or 1, rows, G), None
    without them."""

    size: int
    pattern: torch.Tensor | None
    keys: torch.Tensor
    queries: torch.Tensor | None
    blocked: float
    side: Callable[[int, int], torch.Tensor] | None = None


def band_pattern(mask: Callable, band: int, device: torch.device) -> torch.Tensor | None:
    """mask(q_pos, k_pos) -> additive (1, H or 1, T, S) or None, the layer's kinds over positions: the pattern of
    a block of band + 1 queries over its three blocks of keys (1 or H, b, 3b); None where the kinds add nothing
    (a packed batch's band alone)."""
    b = band + 1
    pattern = mask(torch.arange(b, 2 * b, device=device), torch.arange(3 * b, device=device))
    return None if pattern is None else pattern[0]


def group_blocks(heads: int, size: int, extra: int) -> int:
    """Blocks per group for `heads` (B x H) rows of blocks of `size` and `extra` global keys: as many as keep a
    group's scores within GROUP_SCORES, at least one."""
    return max(1, GROUP_SCORES // (heads * size * (3 * size + extra)))


def blocked_scores(heads: int, T: int, band: int, extra: int) -> int:
    """The numbers of scores `blocked_attend` holds at once over T tokens for `heads` (B x H): one group's."""
    size = band + 1
    return heads * min(-(-T // size), group_blocks(heads, size, extra)) * size * (3 * size + extra)


def blocked_attend(q, k, v, blocks: BandBlocks, scale: float | None, dropout_p: float) -> torch.Tensor:
    """q (B, H, T, D), k and v (B, K, T + G, D) (the G global keys after the own ones) -> (B, H, T, D): each
    query's softmax over the keys of its window and the global ones, a group of blocks at a time (see the
    module)."""
    T, b = q.shape[2], blocks.size
    count = -(-T // b)
    per = group_blocks(q.shape[0] * q.shape[1], b, k.shape[2] - T)
    run = partial(_group, k=k, v=v, blocks=blocks, T=T, scale=scale, p=dropout_p)
    if per >= count:
        return run(q, 0, count)
    outputs = []
    for n0 in range(0, count, per):
        n1 = min(count, n0 + per)
        rows = q[:, :, n0 * b : n1 * b]
        outputs.append(
            checkpoint(run, rows, n0, n1, use_reentrant=False) if torch.is_grad_enabled() else run(rows, n0, n1)
        )
    return torch.cat(outputs, dim=2)


def _windows(x: torch.Tensor, n0: int, n1: int, b: int, T: int, dim: int) -> torch.Tensor:
    """x's own rows (the first T along `dim`) of the windows of blocks n0..n1: rows (n - 1) b .. (n + 2) b - 1 of
    block n, zero beyond 0..T-1; the window as a new last dim (..., n1 - n0, ..., 3b)."""
    start, end = (n0 - 1) * b, (n1 + 1) * b
    rows = x.narrow(dim, max(0, start), min(T, end) - max(0, start))
    pad = [0, 0] * (x.dim() - 1 - dim) + [max(0, -start), max(0, end - T)]
    return F.pad(rows, pad).unfold(dim, 3 * b, b)


def _group(q_rows, n0: int, n1: int, *, k, v, blocks: BandBlocks, T: int, scale, p: float) -> torch.Tensor:
    """Blocks n0..n1 of queries q_rows (B, H, rows, D) -> their outputs (B, H, rows, D)."""
    B, H, rows, D = q_rows.shape
    K, b, m, G = k.shape[1], blocks.size, n1 - n0, k.shape[2] - T
    if scale != 1.0:  # the queries scaled, not the scores: b x D numbers a block, not b x 3b
        q_rows = q_rows * (D**-0.5 if scale is None else scale)
    q = F.pad(q_rows, (0, 0, 0, m * b - rows)).view(B, K, H // K, m, b, D)  # query head h reads kv head h // (H/K)
    values = _windows(v, n0, n1, b, T, 2).transpose(-1, -2)[:, :, None]  # (B, K, 1, m, 3b, D)
    scores = (q @ _windows(k, n0, n1, b, T, 2)[:, :, None]).view(B, H, m, b, 3 * b)  # a product's own output:
    if blocks.pattern is not None:  # added to and masked in place (its backward reads q and k, not it)
        scores.add_(blocks.pattern[:, None])
    scores.masked_fill_(~_allowed(blocks, n0, n1, T)[:, None], blocks.blocked)
    if blocks.side is None:
        probs = dropout(scores.softmax(-1), p)
        out = probs.view(B, K, H // K, m, b, 3 * b) @ values
    else:  # the global keys' scores beside the window's, one softmax over both
        side = F.pad(blocks.side(n0 * b, n0 * b + rows), (0, 0, 0, m * b - rows)).view(B, -1, m, b, G)
        global_scores = (q.view(B, K, H // K * m * b, D) @ k[:, :, T:].transpose(-1, -2)).view(B, H, m, b, G)
        probs = dropout(torch.cat([scores, global_scores.add_(side)], dim=-1).softmax(-1), p)
        local = probs[..., : 3 * b].reshape(B, K, H // K, m, b, 3 * b) @ values
        remote = probs[..., 3 * b :].reshape(B, K, H // K * m * b, G) @ v[:, :, T:]
        out = local + remote.view(B, K, H // K, m, b, D)
    return out.view(B, H, m * b, D)[:, :, :rows]


def _allowed(blocks: BandBlocks, n0: int, n1: int, T: int) -> torch.Tensor:
    """Which keys of the windows of blocks n0..n1 the batch lets each query see: (B or 1, n1 - n0, b or 1, 3b)."""
    b = blocks.size
    keys = _windows(blocks.keys, n0, n1, b, T, 1)  # (B or 1, m, 3b)
    real = (keys != 0)[:, :, None, :]
    if blocks.queries is None:
        return real
    queries = F.pad(blocks.queries[:, n0 * b : n1 * b], (0, (n1 - n0) * b - min(T, n1 * b) + n0 * b))
    return real & (queries.view(-1, n1 - n0, b, 1) == keys[:, :, None, :])
