"""Batched transcription: each recording cut at its silences into pieces no longer than the model's window,
every piece of every recording decoded as one batch through `generate` (Whisper's rules, with or without
timestamps), then each recording's pieces put back together as one Transcript, times offset by each piece's
start (faster-whisper's batched mode, with an energy detector in place of its VAD).

    spans = cut_at_silences(wave, 16_000, window_seconds=30)        # [(start, end), ...] in samples
    transcripts = transcribe_batched(opened, ["a.wav", "b.flac"])   # one Transcript a recording

The cut: the wave in frames of 30 ms, each frame's energy in dB; a piece that would pass the window ends in
the quietest stretch (0.3 s, its frames' mean dB: a threshold relative to the recording itself) of the last
half of its window, at that stretch's middle (the latest such stretch on a tie, so pure silence cuts late),
so a cut falls in a pause where there is one and a piece never passes the window. A piece of silence (its
loudest frame 50 dB below the recording's loudest) is left out, as faster-whisper's VAD leaves it.
The energies are computed on the wave's device and read on the host once (the cuts are the host's choice).

Shapes: N samples, F frames of 30 ms, B pieces, C mel bins, T window frames, L tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from encdec.audio import HOP, SAMPLE_RATE, log_mel
from encdec.audio.recordings import MAX_SECONDS
from encdec.errors import ConfigError
from encdec.generation.generate import generate, resolve_config
from encdec.runs.speech_text import Recording, SpeechText, waveform
from encdec.transcription.transcript import Segment, Transcript

FRAME_SECONDS = 0.03  # an energy frame
STRETCH_SECONDS = 0.3  # the quiet stretch a cut is placed in the middle of
SILENCE_DB = 50.0  # a piece whose loudest frame is this far below the recording's loudest is silence, left out
SECONDS_PER_TIMESTAMP = 0.02  # Whisper's <|0.00|> <|0.02|> ...
BATCH_PIECES = 16  # pieces decoded together by transcribe_batched


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
    if wave.dim() != 1:
        raise ConfigError(f"cut_at_silences takes one wave (N,) of samples, got a tensor of shape {tuple(wave.shape)}")
    frame = max(round(frame_seconds * sample_rate), 1)
    window = int(window_seconds * sample_rate) // frame  # frames a piece may hold
    if window < 2:
        raise ConfigError(f"a window of {window_seconds} s holds fewer than two frames of {frame_seconds} s")
    N, F = len(wave), len(wave) // frame
    if F == 0:
        return [(0, N)] if N else []
    energy = wave[: F * frame].float().view(F, frame).pow(2).mean(1)  # (F,)
    decibels = 10 * torch.log10(energy + 1e-10)
    stretch = max(min(round(stretch_seconds / frame_seconds), window // 2, F), 1)
    quiet = torch.nn.functional.avg_pool1d(decibels[None, None], stretch, 1)[0, 0]  # (F - stretch + 1,) mean dB
    both = torch.cat((decibels, quiet)).tolist()  # the one copy to the host
    decibels, quiet = both[:F], both[F:]
    spans, start = [], 0  # start: a frame
    while (N - start * frame) > window * frame:
        first, last = start + window // 2, start + window - stretch  # the stretch's first frame
        best = min(range(last, first - 1, -1), key=lambda at: quiet[at])  # the latest of the quietest
        cut = best + stretch // 2
        spans.append((start * frame, cut * frame))
        start = cut
    spans.append((start * frame, N))
    if silence_db is None:
        return spans
    floor = max(decibels) - silence_db
    return [(a, b) for a, b in spans if max(decibels[a // frame : b // frame] or [floor]) >= floor]


@dataclass(frozen=True)
class Pieces:
    """The pieces of some recordings: their log-mels (B, C, T), and each piece's recording and span in samples."""

    features: torch.Tensor
    recording: list[int]
    spans: list[tuple[int, int]]
    durations: list[float]  # each recording's length in seconds


def pieces_of(waves: Sequence[torch.Tensor], speech: SpeechText) -> Pieces:
    """Every recording cut at its silences to the model's window, and the pieces' log-mels of its bins."""
    window_seconds = speech.frames * HOP / SAMPLE_RATE
    cuts, owners, durations = [], [], []
    for index, wave in enumerate(waves):
        spans = cut_at_silences(wave, SAMPLE_RATE, window_seconds)
        cuts += spans
        owners += [index] * len(spans)
        durations.append(round(len(wave) / SAMPLE_RATE, 3))
    if not cuts:
        raise ConfigError("the recordings hold no samples: there is nothing to transcribe")
    slices = [waves[owner][start:end] for owner, (start, end) in zip(owners, cuts)]
    return Pieces(log_mel(slices, speech.n_mels, frames=speech.frames), owners, cuts, durations)


def segments_of(
    tokens: list[int], first: int, start: float, end: float, timestamps: bool = True
) -> list[tuple[float, float, list[int]]]:
    """One piece's decoding (generate's tokens under Whisper's rules: the new tokens, window after window) ->
    [(start, end, text tokens), ...] in seconds of the recording, the piece starting at `start`. Timestamps
    (ids from `first`) bound segments; three or more in a row mark a window decoded again from the first of
    the last pair before them (generation.whisper_windows), whose times count from there. Without timestamps
    asked, the piece is one segment (a timestamp a model emits all the same is left out, as its text drops it)."""
    if not timestamps:
        text = [token for token in tokens if token < first]
        return [(start, end, text)] if text else []
    found, opened, text, offset, run = [], None, [], start, []
    for token in [*tokens, None]:
        if token is not None and token >= first:
            run.append((token - first) * SECONDS_PER_TIMESTAMP)
            continue
        if len(run) >= 3:  # ... t_end t_start | the next window's t0 ...: the next window starts at t_end
            found.append((offset if opened is None else opened, offset + run[0], text))
            offset, run, opened, text = offset + run[0], run[2:], None, []
        for time in run:  # a timestamp closes the segment open, or opens one
            if opened is not None and text:
                found.append((opened, offset + time, text))
                opened, text = None, []
            else:
                opened = offset + time
        run = []
        if token is not None:
            text.append(token)
    if text:  # no closing timestamp: the segment runs to the piece's end
        found.append((opened if opened is not None else start, end, text))
    return [(min(a, end), min(max(a, b), end), t) for a, b, t in found if t]


def transcripts_of(
    pieces: Pieces,
    tokens: list[list[int]],
    speech: SpeechText,
    first: int,
    timestamps: bool,
    task: str,
    language: str | None,
) -> list[Transcript]:
    """The pieces' decodings put together into one Transcript a recording, times in its seconds."""
    found: list[list[Segment]] = [[] for _ in pieces.durations]
    for owner, (begin, end), row in zip(pieces.recording, pieces.spans, tokens):
        seek = begin // HOP
        for start, stop, ids in segments_of(row, first, begin / SAMPLE_RATE, end / SAMPLE_RATE, timestamps):
            text = speech.decode(ids, skip_special_tokens=True)
            found[owner].append(Segment(len(found[owner]), round(start, 3), round(stop, 3), text, tuple(ids), seek))
    return [
        Transcript(
            " ".join(s.text.strip() for s in segments if s.text.strip()), tuple(segments), duration, language, task
        )
        for segments, duration in zip(found, pieces.durations)
    ]


def transcribe_batched(
    model,
    speech: SpeechText,
    recordings: Sequence[Recording],
    defaults: dict | None = None,
    batch_pieces: int = BATCH_PIECES,
    max_seconds: float = MAX_SECONDS,
    **options,
) -> list[Transcript]:
    """One Transcript for each recording (a path, a file's bytes, a 16 kHz wave): cut at its silences, every
    piece of every recording decoded `batch_pieces` at a time by `generate(model, ..., **options)` (Whisper's
    options: language, task, return_timestamps, prompt_ids, temperature ...), over `defaults` (a checkpoint's)."""
    waves = [waveform(recording, max_seconds) for recording in recordings]
    pieces = pieces_of(waves, speech)
    cfg = resolve_config(model, dict(options), defaults)
    if cfg.whisper is None:
        raise ConfigError("batched transcription needs a Whisper's decoding rules, which this model has none of")
    first, pad = cfg.whisper.timestamp_begin, cfg.pad_token_id
    tokens = []
    for at in range(0, len(pieces.spans), batch_pieces):
        features = pieces.features[at : at + batch_pieces]
        out = generate(model, features, defaults=defaults, **options)
        tokens += [trimmed(row, pad) for row in out.tolist()]
    task = cfg.task or "transcribe"
    return transcripts_of(pieces, tokens, speech, first, bool(cfg.return_timestamps), task, options.get("language"))


def trimmed(row: list[int], pad: int) -> list[int]:
    """A row of generate's Whisper output without its right padding (the pad id, never a kept token)."""
    end = len(row)
    while end and row[end - 1] == pad:
        end -= 1
    return row[:end]
