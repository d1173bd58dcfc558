"""Position information: sinusoidal (Vaswani, Marian, fairseq), learned absolute, T5 relative bias, and RoPE.

Shapes: B batch, T query length, S key length, H heads, D head dim, C model dim.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def on_meta() -> bool:
    """Whether tensors are made on the meta device now (a model built to be counted, models/parameter_count.py):
    a fixed table is its shape alone there, without the values torch's meta kernels would pretend to compute
    (the first of which imports torch._dynamo, a second of an `encdec size`)."""
    return torch.empty(0).is_meta


def sinusoidal_table(n_positions: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """p[pos, 2i] = sin(pos / 10000^(2i/d)), p[pos, 2i+1] = cos(same) (Vaswani et al. 2017, 3.5).

    layout "halves" puts the same sines in the first half and the cosines in the
    second (Marian, and Hugging Face's MarianSinusoidalPositionalEmbedding).
    """
    if on_meta():
        return torch.empty(n_positions, d_model)
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    sin, cos = torch.sin(position * inv_freq), torch.cos(position * inv_freq)[:, : d_model // 2]
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    if layout == "halves":
        half = (d_model + 1) // 2
        table[:, :half], table[:, half:] = sin, cos
    else:
        table[:, 0::2], table[:, 1::2] = sin, cos
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal position vectors: positions (..., T) -> (..., T, C)."""

    def __init__(self, max_positions: int, d_model: int, layout: str = "interleaved"):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_positions, d_model, layout), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


def fairseq_table(first: int, n_positions: int, d_model: int) -> torch.Tensor:
    """Rows first .. first + n_positions - 1 of fairseq's sinusoidal table (tensor2tensor's): sines in the first
    half, cosines in the second, frequencies 10000^(-i / (C/2 - 1)), a zero column when C is odd; computed in
    float32 as fairseq and Hugging Face's M2M100SinusoidalPositionalEmbedding compute it, so the values agree."""
    if on_meta():
        return torch.empty(n_positions, d_model)
    half = d_model // 2
    inv_freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    angles = torch.arange(first, first + n_positions, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return torch.cat([table, torch.zeros(n_positions, 1)], dim=1) if d_model % 2 else table


class PaddedSinusoidalPositions(nn.Module):
    """fairseq's sinusoidal positions (M2M100, NLLB): (positions (..., T), ids (..., T)) -> (..., T, C).

    Position p is looked up at row pad_id + 1 + p of fairseq's table (rows up to pad_id are never read, so
    they are not kept) and a pad token gets a zero vector, as fairseq's `make_positions` pads them.
    """

    def __init__(self, max_positions: int, d_model: int, pad_id: int):
        super().__init__()
        self.pad_id = pad_id
        self.register_buffer("table", fairseq_table(pad_id + 1, max_positions, d_model), persistent=False)

    def forward(self, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.table[positions] * (ids != self.pad_id).unsqueeze(-1).to(self.table.dtype)

    def count_real(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> (B, T): each token's position among the real tokens of its row (pads: 0, zeroed
        anyway), so a left-padded row reads the positions a right-padded one does, as in fairseq."""
        return ((ids != self.pad_id).cumsum(-1) - 1).clamp(min=0)


class LearnedPositions(nn.Embedding):
    """A learned absolute position table (GPT-2, nanoGPT): positions (..., T) -> (..., T, C).

    `offset` reserves rows before position 0: BART's table has 2 extra rows and
    looks position p up at row p + 2.
    """

    def __init__(self, max_positions: int, d_model: int, offset: int = 0):
        super().__init__(max_positions + offset, d_model)
        self.offset = offset

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return super().forward(positions + self.offset if self.offset else positions)


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of `key_pos - query_pos` (Raffel et al. 2020, 2.1; Mesh TensorFlow).

    Half the buckets hold exact small distances, the other half log-spaced ones up
    to `max_distance`; a bidirectional bias splits the buckets by direction, a
    unidirectional one maps all future keys to bucket 0.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """T5's learned per-head bias of the attention scores, one scalar per bucket and head."""

    def __init__(self, n_heads: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.embed = nn.Embedding(num_buckets, n_heads)
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self._buckets: dict[torch.device, torch.Tensor] = {}  # by_distance's bucket of each distance, per device

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """q_pos (T,), k_pos (S,) -> bias (1, H, T, S); q_pos (B, T) -> (B, H, T, S).

        Without a gradient to the table (inference, a frozen table), every distance of max_distance or more lies
        in the last bucket of its side, so the bias of each distance d in [-M, M] (M = max_distance) is looked up
        once (`by_distance`, (2M + 1, H)) and each pair reads its clamped distance's: three operations over the
        T x S pairs where the bucket's arithmetic takes about a dozen (a server's packed join of 256 tokens spent
        most of its encoder pass on them), the same buckets and values. Training the table, each pair's bucket is
        computed and its gradient summed once a bucket, as it always was (summed by distance first, a two-process
        run's losses drifted 3e-5 from one process's)."""
        relative = k_pos[..., None, :] - q_pos[..., :, None]  # (T, S) or (B, T, S)
        if torch.is_grad_enabled() and self.embed.weight.requires_grad:
            bucket = relative_position_bucket(relative, self.bidirectional, self.num_buckets, self.max_distance)
            bias = self.embed(bucket).movedim(-1, -3)  # (H, T, S) or (B, H, T, S)
        else:
            M = self.max_distance
            bias = F.embedding(relative.clamp_(-M, M) + M, self.by_distance(k_pos.device)).movedim(-1, -3)
        return bias if bias.dim() == 4 else bias.unsqueeze(0)

    def by_distance(self, device: torch.device) -> torch.Tensor:
        """(2M + 1, H): the bias of each distance k - q from -M to M, from the table (its gradient flows there)."""
        compiling = torch.compiler.is_compiling()  # a compiled graph makes its own (a constant), keeping no store
        buckets = None if compiling else self._buckets.get(device)
        if buckets is None:  # the buckets of -M..M: fixed by the config, made once a device (a plain tensor, which
            with torch.inference_mode(False):  # training may save for backward, whatever mode first asked)
                M = self.max_distance
                distances = torch.arange(-M, M + 1, device=device)
                buckets = relative_position_bucket(distances, self.bidirectional, self.num_buckets, M)
            if not compiling:
                self._buckets[device] = buckets
        return self.embed(buckets)


class RotaryEmbedding(nn.Module):
    """RoPE with rotate-half pairing: dimension i turns with dimension i + D/2 (Su et al. 2021).

    Queries and keys are rotated by their own positions, so q_i . k_j depends only
    on i - j. Positions are (T,) shared by the batch or (B, T) per example. The
    frequencies and angles stay fp32 whatever the module is cast to: in bf16 the
    angle at position 511 would be off by about 0.27 rad.
    """

    def __init__(self, d_head: int, theta: float = 10000.0, scale: float = 1.0):
        super().__init__()
        if d_head % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {d_head}")
        self.d_head, self.theta, self.scale = d_head, theta, scale
        self.register_buffer("inv_freq", self.frequencies(), persistent=False)

    def frequencies(self) -> torch.Tensor:
        """(D/2,) fp32 on the CPU: theta^(-2i/D), divided by `scale` (linear scaling: positions read 1/scale apart,
        as transformers' "linear" RoPE divides its frequencies); its shape alone on the meta device."""
        if on_meta():
            return torch.empty(self.d_head // 2)
        inv_freq = 1.0 / self.theta ** (torch.arange(0, self.d_head, 2, dtype=torch.float32) / self.d_head)
        return inv_freq / self.scale if self.scale != 1.0 else inv_freq

    def _apply(self, fn, recurse=True):
        """Follow device moves (and to_empty) but not dtype casts: rebuild the table in fp32
        on whatever device `fn` left it, so its values never pass through bf16 (or meta)."""
        super()._apply(fn, recurse)
        self.inv_freq = self.frequencies().to(self.inv_freq.device)
        return self

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (B, H, T, D), positions (T,) or (B, T) -> x rotated, same shape and dtype."""
        angles = positions.float()[..., None] * self.inv_freq  # (T, D/2) or (B, T, D/2)
        angles = torch.cat((angles, angles), dim=-1)
        if angles.dim() == 3:
            angles = angles[:, None]  # (B, 1, T, D) to broadcast over heads
        x1, x2 = x.float().chunk(2, dim=-1)
        rotated = torch.cat((-x2, x1), dim=-1)
        return (x.float() * angles.cos() + rotated * angles.sin()).to(x.dtype)
