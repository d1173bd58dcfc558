"""Where batched transcription cuts a recording: at its pauses, as faster-whisper's batched mode cuts it (the
speech a VAD finds, merged up to `chunk_length`), with an energy detector in place of its Silero VAD.

    pieces = cut_at_pauses(wave, 16_000, chunk_length=10)       # [(start, end), ...] in samples
    spans = cut_at_silences(wave, 16_000, window_seconds=30)     # the quiet-stretch cut alone, tiling the wave

Levels: the wave in frames of 30 ms, each frame's energy in dB, computed on the wave's device and read on the
host once (the cuts are the host's choice).

`cut_at_pauses`: a frame is speech where its level lies within `speech_db` (50 dB) of the recording's loudest
frame. A silence (frames below that) shorter than `min_silence` (0.16 s, faster-whisper's batched mode's
min_silence_duration_ms) joins the speech on either side; a longer one splits it. A stretch of speech longer than
`chunk_length` is cut as `cut_at_silences` cuts (in the quietest 0.3 s of each window's last half, the window
being `chunk_length`). Each stretch is padded by `speech_pad` seconds on each side (faster-whisper's
speech_pad_ms, 0.4 s there; none by default here, see below), no further than half the silence to its neighbour
nor past `chunk_length`; then neighbouring stretches are merged from the first while the merged piece (the
first's start to the last's end, the silences between kept) stays within `chunk_length` (faster-whisper's
merge_segments), except where it ends: a piece that must end before the next stretch ends at the longest silence
of its last half (past half of `chunk_length`), not at the last that fits. Speech pauses longer between sentences
than at a comma; faster-whisper's greedy merge ends a piece at whichever pause comes last, and so cuts a sentence
at its comma about as often as not, whose parts a model reads worse than the whole (runs/speech4 on a 13-minute
recording in pieces of 8 s: WER 62.8 cut greedily, 61.4 so; docs/transcribe.md). The silence outside the pieces
is left out.

Why no padding by default: a frame partly holding speech counts as speech (up to 30 ms of padding already), and
a piece's end is followed by the zeros its window is padded with in any case, so padding adds silence before the
speech alone; a model trained on clips cut to their speech (the recipe's runs/speech2) reads worse after it (on
benchmarks/bench_longform.py's first recording, its sentences' own spans give WER 74.1, the same spans starting
0.1 s earlier 75.6, 0.3 s earlier 83.4). Whisper's checkpoints, trained on speech with silence around it, take
faster-whisper's 0.4 s (speech_pad=0.4, `encdec transcribe --batched --speech-pad 0.4`).

`cut_at_silences`: the wave tiled by pieces no longer than the window, each cut in the middle of the quietest
stretch (0.3 s, its frames' mean dB) of the last half of its window (the latest such stretch on a tie, so pure
silence cuts late); a piece whose loudest frame lies 50 dB below the recording's loudest is left out.

Shapes: N samples, F frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from encdec.audio.recordings import MAX_SECONDS
from encdec.errors import ConfigError
from encdec.schema import Range, value_of

FRAME_SECONDS = 0.03  # an energy frame
STRETCH_SECONDS = 0.3  # the quiet stretch a cut is placed in the middle of
SILENCE_DB = 50.0  # a frame this far below the recording's loudest is silence
MIN_SILENCE = 0.16  # seconds of silence that split speech (faster-whisper's batched min_silence_duration_ms)
SPEECH_PAD = 0.0  # seconds of padding each side of speech (faster-whisper's speech_pad_ms is 0.4: see above)
MIN_CHUNK = 0.1  # seconds: the shortest piece asked for (a two-hour recording in at most 72,000 pieces)

Seconds = Annotated[float, Range(0, MAX_SECONDS)]
Decibels = Annotated[float, Range(0, 1000)]


@dataclass(frozen=True)
class Levels:
    """A wave's frames of `frame` samples and each whole frame's energy in dB (F,), on the host; N samples."""

    sample_rate: int
    frame: int
    length: int
    decibels: list[float]


def levels_of(wave: torch.Tensor, sample_rate: int, frame_seconds: float = FRAME_SECONDS) -> Levels:
    """wave (N,) -> its frames' levels, computed on its device and copied to the host once."""
    if wave.dim() != 1:
        raise ConfigError(f"the cut takes one wave (N,) of samples, got a tensor of shape {tuple(wave.shape)}")
    frame = max(round(frame_seconds * sample_rate), 1)
    F = len(wave) // frame
    energy = wave[: F * frame].float().view(F, frame).pow(2).mean(1)  # (F,)
    return Levels(sample_rate, frame, len(wave), (10 * torch.log10(energy + 1e-10)).tolist())


def quiet_cuts(levels: Levels, start: int, end: int, window: int, stretch: int) -> list[tuple[int, int]]:
    """Samples [start, end) (start on a frame's edge) as spans tiling them, none longer than `window` frames
    (at least two), each cut in the middle of the quietest `stretch` frames of its window's last half."""
    frame, decibels = levels.frame, levels.decibels
    spans, at = [], start // frame  # at: a frame
    while end - at * frame > window * frame:
        first, last = at + window // 2, at + window - stretch  # the stretch's first frame
        best = min(range(last, first - 1, -1), key=lambda i: sum(decibels[i : i + stretch]))  # the latest quietest
        cut = best + stretch // 2
        spans.append((at * frame, cut * frame))
        at = cut
    spans.append((at * frame, end))
    return spans


def cut_at_silences(
    wave: torch.Tensor,
    sample_rate: int,
    window_seconds: float,
    frame_seconds: float = FRAME_SECONDS,
    stretch_seconds: float = STRETCH_SECONDS,
    silence_db: float | None = SILENCE_DB,
) -> list[tuple[int, int]]:
    """wave (N,) -> [(start, end), ...] sample spans in order, none longer than `window_seconds`, each cut in
    the middle of the quietest `stretch_seconds` of the last half of its window (see the module's note); a
    span whose loudest frame lies more than `silence_db` below the recording's loudest is left out (silence:
    nothing to decode), the others tile the rest. None keeps every span."""
    levels = levels_of(wave, sample_rate, frame_seconds)
    window = int(window_seconds * sample_rate) // levels.frame  # frames a piece may hold
    if window < 2:
        raise ConfigError(f"a window of {window_seconds} s holds fewer than two frames of {frame_seconds} s")
    N, decibels = levels.length, levels.decibels
    if not decibels:
        return [(0, N)] if N else []
    stretch = max(min(round(stretch_seconds / frame_seconds), window // 2, len(decibels)), 1)
    spans = quiet_cuts(levels, 0, N, window, stretch)
    if silence_db is None:
        return spans
    floor, frame = max(decibels) - silence_db, levels.frame
    return [(a, b) for a, b in spans if max(decibels[a // frame : b // frame] or [floor]) >= floor]


def within_window(value: float, window: float, key: str = "chunk_length") -> float:
    """A piece's longest length in seconds, `value`, checked to lie from MIN_CHUNK to a model's `window` (seconds),
    or one sentence naming `key`."""
    says = f"from {MIN_CHUNK:g} s to the model's window of {window:g} s"
    return value_of(Annotated[float, Range(MIN_CHUNK, window, says=says)], value, key)


def cut_at_pauses(
    wave: torch.Tensor,
    sample_rate: int,
    chunk_length: float,
    min_silence: float = MIN_SILENCE,
    speech_pad: float = SPEECH_PAD,
    speech_db: float = SILENCE_DB,
    frame_seconds: float = FRAME_SECONDS,
    stretch_seconds: float = STRETCH_SECONDS,
) -> list[tuple[int, int]]:
    """wave (N,) -> [(start, end), ...] sample spans in order, apart, none longer than `chunk_length` seconds:
    its speech, split at silences of `min_silence` seconds or more, padded by `speech_pad` and merged up to
    `chunk_length` (see the module's note; at least 0.1 s). The silence between them is left out."""
    chunk_length = value_of(Annotated[float, Range(MIN_CHUNK, MAX_SECONDS)], chunk_length, "chunk_length")
    speech_pad = value_of(Seconds, speech_pad, "speech_pad")
    levels = levels_of(wave, sample_rate, frame_seconds)
    N, frame, chunk = levels.length, levels.frame, int(chunk_length * sample_rate)  # chunk: samples
    window = chunk // frame
    if window < 2:
        raise ConfigError(f"a chunk_length of {chunk_length} s holds fewer than two frames of {frame_seconds} s")
    if not levels.decibels:
        return [(0, N)] if N else []
    stretch = max(min(round(stretch_seconds / frame_seconds), window // 2), 1)
    stretches = []
    for start, end in speech_of(levels, min_silence, speech_db):
        stretches += [(start, end)] if end - start <= chunk else quiet_cuts(levels, start, end, window, stretch)
    return merged(padded(stretches, round(speech_pad * sample_rate), chunk, N), chunk)


def speech_of(levels: Levels, min_silence: float = MIN_SILENCE, speech_db: float = SILENCE_DB) -> list[tuple[int, int]]:
    """The speech a VAD finds, as (start, end) samples in order, apart: the frames within `speech_db` of the
    loudest, joined across silences shorter than `min_silence` seconds (the last frame's takes the wave's tail)."""
    min_silence = value_of(Seconds, min_silence, "min_silence")
    speech_db = value_of(Decibels, speech_db, "speech_db")
    frame, decibels = levels.frame, levels.decibels
    if not decibels:
        return []
    gap = max(math.ceil(min_silence * levels.sample_rate / frame - 1e-9), 1)  # silent frames that split speech
    runs = speech_runs(decibels, max(decibels) - speech_db, gap)
    return [(a * frame, levels.length if b == len(decibels) else b * frame) for a, b in runs]


def speech_runs(decibels: list[float], floor: float, gap: int) -> list[tuple[int, int]]:
    """The frames [a, b) at or above `floor`, runs of them joined across fewer than `gap` frames below it."""
    runs: list[list[int]] = []
    for at, level in enumerate(decibels):
        if level < floor:
            continue
        if runs and at - runs[-1][1] < gap:
            runs[-1][1] = at + 1
        else:
            runs.append([at, at + 1])
    return [(a, b) for a, b in runs]


def padded(stretches: list[tuple[int, int]], pad: int, chunk: int, length: int) -> list[tuple[int, int]]:
    """Each stretch widened by `pad` samples a side, at most half the silence to its neighbour (or all of it to
    the wave's ends) and at most half of what `chunk` leaves beside it, so none grows past `chunk`."""
    out = []
    for i, (start, end) in enumerate(stretches):
        room = max(chunk - (end - start), 0) // 2
        before = start if i == 0 else (start - stretches[i - 1][1]) // 2
        after = length - end if i == len(stretches) - 1 else (stretches[i + 1][0] - end) // 2
        out.append((start - min(pad, room, before), end + min(pad, room, after)))
    return out


def merged(stretches: list[tuple[int, int]], chunk: int) -> list[tuple[int, int]]:
    """Neighbours joined from the first into pieces of at most `chunk` samples, each piece that must end before
    the next stretch ended at the longest silence after a stretch it holds that ends past half of `chunk` (the
    latest of equal ones; the last that fits where none ends past half): a sentence's pause before a comma's."""
    pieces: list[tuple[int, int]] = []
    first = 0
    while first < len(stretches):
        start, last = stretches[first][0], first  # last: the last stretch that fits in a piece from `start`
        while last + 1 < len(stretches) and stretches[last + 1][1] - start <= chunk:
            last += 1
        if last + 1 < len(stretches):
            ends = [k for k in range(first, last + 1) if 2 * (stretches[k][1] - start) >= chunk] or [last]
            last = max(ends, key=lambda k: (stretches[k + 1][0] - stretches[k][1], k))
        pieces.append((start, stretches[last][1]))
        first = last + 1
    return pieces
