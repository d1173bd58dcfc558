"""Each decoded token's time in its window, from the cross-attention of a Whisper's alignment heads by dynamic
time warping (openai-whisper's timing.py; transformers' `_extract_token_timestamps`, which this equals).

What the long-form transcriber calls once per window (features of one 30 s window, its decoded tokens):

    times = token_timestamps(model, features, tokens, prompt_length, frames=frames, encoded=encoded)
    times.seconds        # (B, T): token t's time from the window's start (its end: where the next one begins)
    times.probabilities  # (B, T): each token's probability under the model (the prompt's: 1)
    row = tokens[0].tolist(), times.seconds[0].tolist(), times.probabilities[0].tolist()
    words = segment_words(text, *row, spans, eos_id=eos_id, offset=seek_seconds, language="en")  # words.py

`tokens` (B, T) are the whole decoder sequences, prompt first (<|startoftranscript|>, language, task, ...: the first
`prompt_length` tokens), the generated ones after it, their <|endoftext|> included where the decoding wrote it
(generate returns the tokens without it, as transformers' does, which times them with it: its row times the last
word's end); `frames` the window's frames that hold the recording (its last window's are fewer than 3000). One teacher-forced pass records the heads'
probabilities from encdec's own Attention modules (modules.recording); each head's map over the frames that hold
the recording is normalised over the tokens (mean 0, standard deviation 1), median-filtered over time (width 7),
the heads averaged, and the path of least cost through minus that map (DTW) gives each token the encoder position
(20 ms) where the path reaches its row. As transformers does, the rows are the queries that read the generated
tokens (not the prompt's last, which openai-whisper keeps): the prompt's times are 0, generated token g's is the
row that reads it, and the last token (no row reads it) repeats the time before it. So a token's time is where it
ends, and a word spans from the time of the token before it to that of its last token (words.word_timestamps).

Shapes: B batch, T tokens, A alignment heads, S encoder positions (frames / 2), N rows of the warp.
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.generation.generate import resolve_config
from encdec.generation.interface import capabilities_of
from encdec.models.outputs import EncoderOutput
from encdec.modules.recording import recording

SECONDS_PER_POSITION = 0.02  # an encoder position is two 10 ms frames
FILTER_WIDTH = 7  # openai-whisper's medfilt_width, transformers' median_filter_width


@dataclass(frozen=True)
class TokenTimes:
    seconds: torch.Tensor  # (B, T) float32: each token's time from the window's start (the prompt's: 0)
    probabilities: torch.Tensor  # (B, T) float32: each token's probability given those before it (the prompt's: 1)


def alignment_heads(model: nn.Module) -> list[tuple[int, int]]:
    """The (decoder layer, head) pairs whose cross-attention aligns tokens to time: the checkpoint's
    `alignment_heads` (generation_config.json, or a run's generation defaults), else every head of the decoder's
    upper half (openai-whisper's default); one sentence where a pair is not one of the model's heads."""
    rules = resolve_config(model, {}).whisper
    if rules is not None and rules.alignment_heads is not None:
        return checked_heads(model, rules.alignment_heads)
    layers = model.attention_layers().cross
    return [(layer, head) for layer in range(len(layers) // 2, len(layers)) for head in range(layers[layer].n_heads)]


def checked_heads(model: nn.Module, pairs) -> list[tuple[int, int]]:
    """`pairs` [[layer, head], ...] as tuples, or one sentence (ConfigError) where one is not the model's."""
    layers = model.attention_layers().cross
    for layer, head in pairs:
        if not (0 <= layer < len(layers) and 0 <= head < layers[layer].n_heads):
            raise ConfigError(
                f"alignment_heads names decoder layer {layer}, head {head}, but the model has {len(layers)} decoder "
                f"layers of {layers[0].n_heads} cross-attention heads"
            )
    if not pairs:
        raise ConfigError("alignment_heads must name at least one (decoder layer, head) pair")
    return [(layer, head) for layer, head in pairs]


@torch.no_grad()
def token_timestamps(
    model: nn.Module,
    features: torch.Tensor,
    tokens: torch.Tensor,
    prompt_length: int,
    frames: int | list[int] | None = None,
    heads: list[tuple[int, int]] | None = None,
    encoded: EncoderOutput | None = None,
    lengths: list[int] | None = None,
) -> TokenTimes:
    """features (B, M, F) of one window per row, tokens (B, T) its decoder sequences (the first `prompt_length`
    the prompt) -> each token's time in seconds from the window's start and its probability (module docstring).
    `frames`: the frames of each row (or of all) that hold the recording, None: all F; `heads`: the
    (layer, head) pairs to read, None: the model's (alignment_heads); `encoded`: model.encode(features) where
    the caller has it (the decoding's), which saves the pass most of the time costs; `lengths`: each row's
    tokens before its padding (None: all T; padding rows take part in the warp, as in transformers' batched
    generate, and so a row's times would hang on its batch's), padding timed as the row's last token."""
    capabilities = capabilities_of(model)
    if not (capabilities.attention_maps and capabilities.reads_features):
        raise ConfigError(
            "word timestamps are read from the cross-attention of a speech encoder-decoder (a Whisper) over its "
            "audio, and this model is not one"
        )
    B, T = check_inputs(model, features, tokens, prompt_length)
    limits = frames_of(frames, B, features.shape[-1])
    ends = lengths_of(lengths, B, T, prompt_length)
    if encoded is not None and encoded.hidden.shape[0] != B:
        raise DataError(f"encoded holds {encoded.hidden.shape[0]} rows but there are {B} windows")
    heads = alignment_heads(model) if heads is None else checked_heads(model, heads)
    weights, logits = attention_of(model, features, tokens, heads, encoded)  # (B, A, T - 1, S), (B, T - 1, V)
    seconds = torch.zeros(B, T, device=tokens.device)
    for b, end in enumerate(ends):
        if end - 1 > prompt_length:  # the queries that read the generated tokens, all but the last
            jumps = warp_jumps(weights[b, :, prompt_length : end - 1, : limits[b] // 2])  # (end - P - 1,)
            times = jumps.to(seconds.device, torch.float32) * SECONDS_PER_POSITION
            seconds[b, prompt_length : end - 1], seconds[b, end - 1 :] = times, times[-1]  # no row reads the last
    chosen = logits.float().log_softmax(dim=-1).gather(-1, tokens[:, 1:, None])[..., 0].exp()  # (B, T - 1)
    probabilities = torch.cat([torch.ones_like(chosen[:, :1]), chosen], dim=1)
    probabilities[:, :prompt_length] = 1.0
    return TokenTimes(seconds, probabilities)


def check_inputs(model: nn.Module, features: torch.Tensor, tokens: torch.Tensor, prompt_length: int):
    """(B, T), or one sentence (DataError) where the tokens are not a (B, T) integer tensor of one row a window
    with a prompt of 1 to T - 1 tokens, within the model's vocabulary and decoder positions."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise DataError("tokens must be a (batch, length) integer tensor, one row a window")
    B, T = tokens.shape
    if not isinstance(features, torch.Tensor) or features.dim() != 3 or features.shape[0] != B:
        raise DataError(f"features must be a (batch, mel bins, frames) tensor with {B} rows, one a window")
    if not (isinstance(prompt_length, int) and 1 <= prompt_length < T):
        raise DataError(f"prompt_length must be from 1 to {T - 1} (the tokens' length less one), got {prompt_length}")
    _, rows = model.position_limits(model.config)
    if rows is not None and T - 1 > rows:
        raise DataError(f"the tokens are {T} long but the model's decoder reads at most {rows} positions")
    if T and (int(tokens.min()) < 0 or int(tokens.max()) >= model.config.vocab_size):
        raise DataError(f"tokens must be ids from 0 to {model.config.vocab_size - 1}")
    return B, T


def frames_of(frames: int | list[int] | None, batch: int, most: int) -> list[int]:
    """Each row's frames that hold its recording (2 to `most`, the features' frames), or one sentence."""
    rows = [most] * batch if frames is None else [frames] * batch if isinstance(frames, int) else list(frames)
    if len(rows) != batch or not all(type(n) is int and 2 <= n <= most for n in rows):
        raise DataError(f"frames must be one count, or one per row ({batch}), each from 2 to {most} frames")
    return rows


def lengths_of(lengths: list[int] | None, batch: int, most: int, prompt_length: int) -> list[int]:
    """Each row's tokens before its padding (past the prompt, up to `most`), or one sentence."""
    rows = [most] * batch if lengths is None else list(lengths)
    if len(rows) != batch or not all(type(n) is int and prompt_length < n <= most for n in rows):
        raise DataError(f"lengths must give each row's tokens ({batch}), each from {prompt_length + 1} to {most}")
    return rows


def attention_of(model: nn.Module, features, tokens: torch.Tensor, heads: list, encoded: EncoderOutput | None):
    """The `heads`' cross-attention probabilities (B, A, T - 1, S) in float32, and the logits (B, T - 1, V), of
    one teacher-forced pass (over `encoded`, else the features' encoding), dropout off: the decoder reads
    tokens[:, :-1], row t the query that reads token t."""
    cross = model.attention_layers().cross
    layers = sorted({layer for layer, _ in heads})
    was_training = model.training
    model.eval()
    try:
        with recording([cross[layer] for layer in layers]) as records:
            encoded = model.encode(features) if encoded is None else encoded
            logits, _ = model.decode(tokens[:, :-1], encoded)
    finally:
        model.train(was_training)
    maps = {layer: record[0] for layer, record in zip(layers, records, strict=True)}  # (B, H, T - 1, S) each
    return torch.stack([maps[layer][:, head] for layer, head in heads], dim=1).float(), logits


def warp_jumps(weights: torch.Tensor) -> torch.Tensor:
    """weights (A, N, S) of one row -> (N,) the encoder position where the least-cost path enters each row: the
    heads' maps normalised over the rows, median-filtered over time, averaged; then DTW over minus that."""
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    matrix = median_filter((weights - mean) / std, FILTER_WIDTH).mean(dim=0)  # (N, S)
    text, time = dtw(-matrix.double())
    jumps = np.concatenate([[True], np.diff(text) != 0])  # the first step of the path on each row
    return torch.from_numpy(time[jumps])


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """x (A, N, S) -> the median of each `width` neighbours along S, the edges reflected; x as it is where it is too
    short to reflect (openai-whisper's median_filter on a CPU)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = F.pad(x, (pad, pad), mode="reflect")  # (A, N, S + width - 1)
    return padded.unfold(-1, width, 1).sort()[0][..., pad]  # sort, not median: the lower middle of ties alike


def dtw(cost: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """cost (N, S) float64 -> the least-cost monotonic path from (0, 0) to (N - 1, S - 1), as its row and column
    indices: openai-whisper's dtw_cpu (and transformers' _dynamic_time_warping) step for step, the running cost
    kept in float32 and a tie going to the step left (then up), so the paths are theirs exactly.

    Written here: no well-kept library has this variant (dtaidistance's and tslearn's take two series, not a cost
    matrix, and break ties otherwise). The cells of one anti-diagonal depend only on the two before, so each
    diagonal is one vectorised step on the cost's device (N + S steps instead of N x S); the path is traced back
    on the host."""
    N, S = cost.shape
    device = cost.device
    diagonals = N + S + 1  # cell (i, j) of the (N + 1, S + 1) table lies at [i + j, i] in the skewed tables
    d = torch.arange(diagonals, device=device)[:, None]
    i = torch.arange(1, N + 1, device=device)[None, :]
    j = d - i  # (D, N): the column of cell (i, d - i)
    inside = (j >= 1) & (j <= S)
    skewed_cost = torch.where(inside, cost[i - 1, (j - 1).clamp(0, S - 1)], 0.0)  # (D, N): cost[i - 1, j - 1]
    total = torch.full((diagonals, N + 1), torch.inf, dtype=torch.float32, device=device)
    trace = torch.full((diagonals, N + 1), -1, dtype=torch.int8, device=device)
    total[0, 0] = 0.0
    for k in range(2, diagonals):
        c0, c1, c2 = total[k - 2, :N], total[k - 1, :N], total[k - 1, 1:]  # from (i-1, j-1), (i-1, j), (i, j-1)
        step = torch.where((c0 < c1) & (c0 < c2), 0, torch.where((c1 < c0) & (c1 < c2), 1, 2))
        best = torch.where(step == 0, c0, torch.where(step == 1, c1, c2))
        total[k, 1:] = (skewed_cost[k] + best.double()).float()  # float64 sum, float32 store, as theirs
        trace[k, 1:] = step.to(torch.int8)
        total[k, k:] = torch.inf  # cells of column 0 and before stay unreachable
    return backtrace(trace.cpu().numpy(), N, S)


def backtrace(trace: np.ndarray, N: int, S: int) -> tuple[np.ndarray, np.ndarray]:
    """The path's (row, column) indices from the skewed trace [i + j, i] (0 diagonal, 1 up, 2 left), from the
    last cell back to the first; on row 0 the path goes left, on column 0 up."""
    i, j = N, S
    rows, columns = [], []
    while i > 0 or j > 0:
        rows.append(i - 1)
        columns.append(j - 1)
        step = 2 if i == 0 else 1 if j == 0 else trace[i + j, i]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        elif step == 2:
            j -= 1
        else:
            raise RuntimeError(f"dynamic time warping left no step at ({i}, {j})")
    return np.array(rows[::-1]), np.array(columns[::-1])
