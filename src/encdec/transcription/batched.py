"""Batched transcription: each recording cut at its pauses into pieces of at most `chunk_length` seconds (the
model's window by default), every piece of every recording decoded as one batch through `generate` (Whisper's
rules, with or without timestamps), then each recording's pieces put back together as one Transcript, times
offset by each piece's start (faster-whisper's batched mode, `BatchedInferencePipeline.transcribe(chunk_length=)`,
with an energy detector in place of its VAD: encdec.transcription.segmentation).

    transcripts = transcribe_batched(model, speech, ["a.wav", "b.flac"], defaults)        # one Transcript each
    transcripts = transcribe_batched(model, speech, ["talk.wav"], defaults, chunk_length=5)  # shorter pieces
    transcripts = transcribe_batched(model, speech, ["talk.wav"], defaults, word_timestamps=True)  # and words

The cut (segmentation.cut_at_pauses): the speech found by frame energy, split at silences of 0.16 s or more,
padded by `speech_pad` seconds a side (none by default), neighbours merged while the piece stays within
`chunk_length`; speech longer than that cut in its quietest stretches. The silence outside the pieces is left
out, as faster-whisper's VAD leaves it.

Words (word_timestamps=True): after the decoding, a batch's pieces are timed in one teacher-forced pass
(transcription.word_times: the alignment heads' cross-attention, dynamic time warping), each piece's decoder
sequence as long form times a window's (its prompt, the tokens it kept, timestamps included, and
<|endoftext|>) over the piece's own log-mel, and each segment's words read from its tokens (transcription.words).
Each piece is aligned once, as faster-whisper's batched mode aligns each chunk: a piece `generate` decoded again
from a cut (a decoding that stopped mid-segment) is timed in that one pass too, its text against its whole audio,
where long form times each decoding apart with the tokens it dropped after the cut, as transformers does.

Shapes: N samples, B pieces, C mel bins, T window frames, L tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import torch

from encdec.audio import HOP, SAMPLE_RATE, log_mel
from encdec.audio.recordings import MAX_SECONDS
from encdec.errors import ConfigError
from encdec.generation.generate import generate, prepare, resolve_config
from encdec.runs.speech_text import Recording, SpeechText, waveform
from encdec.schema import Range
from encdec.transcription.segmentation import MIN_CHUNK, SPEECH_PAD, cut_at_pauses, within_window
from encdec.transcription.transcript import Segment, Transcript, Word
from encdec.transcription.word_times import alignment_heads, token_timestamps
from encdec.transcription.words import word_timestamps

SECONDS_PER_TIMESTAMP = 0.02  # Whisper's <|0.00|> <|0.02|> ...
BATCH_PIECES = 16  # pieces decoded together by transcribe_batched
MAP_BYTES = 256 << 20  # a word-timing pass's attention maps at most (Whisper base: 32 MB a piece of 224 tokens)
ChunkLength = Annotated[float, Range(MIN_CHUNK, MAX_SECONDS)]  # seconds; a model's window bounds it further


def window_of(speech: SpeechText) -> float:
    """The model's window in seconds: the longest piece it reads."""
    return speech.frames * HOP / SAMPLE_RATE


def chunk_length_of(value: float | None, speech: SpeechText, key: str = "chunk_length") -> float:
    """`value` checked to lie from MIN_CHUNK to the model's window (None: the window), or one sentence naming `key`."""
    window = window_of(speech)
    return window if value is None else within_window(value, window, key)


@dataclass(frozen=True)
class Pieces:
    """The pieces of some recordings: each one's wave (a view of its recording's), recording and span in samples;
    their log-mels (B, C, T) made a batch at a time by `features`."""

    slices: list[torch.Tensor]
    recording: list[int]
    spans: list[tuple[int, int]]
    durations: list[float]  # each recording's length in seconds
    n_mels: int
    frames: int

    def features(self, start: int, stop: int) -> torch.Tensor:
        """The log-mels (B, C, T) of pieces start..stop-1, on their waves' device."""
        return log_mel(self.slices[start:stop], self.n_mels, frames=self.frames)

    def held(self, index: int) -> int:
        """The frames of piece `index`'s log-mel that hold its samples (2 at least, the window at most)."""
        return min(max(-(-len(self.slices[index]) // HOP), 2), self.frames)


@dataclass(frozen=True)
class Timed:
    """A piece's decoder sequence as word_times.token_timestamps timed it: the prompt (its first `prompt` tokens),
    the piece's tokens, <|endoftext|> (`eos`: below it are the text's ids); each token's time in seconds from the
    piece's start and its probability."""

    prompt: int
    eos: int
    sequence: list[int]
    seconds: list[float]
    probabilities: list[float]


def pieces_of(
    waves: Sequence[torch.Tensor],
    speech: SpeechText,
    chunk_length: float | None = None,
    speech_pad: float = SPEECH_PAD,
) -> Pieces:
    """Every recording cut at its pauses into pieces of at most `chunk_length` seconds (None: the model's window),
    its speech padded by `speech_pad` seconds a side."""
    chunk_length = chunk_length_of(chunk_length, speech)
    cuts, owners, durations = [], [], []
    for index, wave in enumerate(waves):
        spans = cut_at_pauses(wave, SAMPLE_RATE, chunk_length, speech_pad=speech_pad)
        cuts += spans
        owners += [index] * len(spans)
        durations.append(round(len(wave) / SAMPLE_RATE, 3))
    if not cuts:
        raise ConfigError("the recordings hold no samples: there is nothing to transcribe")
    slices = [waves[owner][start:end] for owner, (start, end) in zip(owners, cuts)]
    return Pieces(slices, owners, cuts, durations, speech.n_mels, speech.frames)


def segments_of(
    tokens: list[int], first: int, start: float, end: float, timestamps: bool = True
) -> list[tuple[float, float, list[int]]]:
    """segment_places' segments with their text tokens in place of their places."""
    return [
        (a, b, [tokens[i] for i in places]) for a, b, places in segment_places(tokens, first, start, end, timestamps)
    ]


def segment_places(
    tokens: list[int], first: int, start: float, end: float, timestamps: bool = True
) -> list[tuple[float, float, list[int]]]:
    """One piece's decoding (generate's tokens under Whisper's rules: the new tokens, window after window) ->
    [(start, end, text tokens), ...] in seconds of the recording, the piece starting at `start`. Timestamps
    (ids from `first`) bound segments; three or more in a row mark a window decoded again from the first of
    the last pair before them (generation.whisper_windows), whose times count from there. Without timestamps
    asked, the piece is one segment (a timestamp a model emits all the same is left out, as its text drops it).
    Each segment's text tokens are given by their places in `tokens`."""
    if not timestamps:
        text = [place for place, token in enumerate(tokens) if token < first]
        return [(start, end, text)] if text else []
    found, opened, text, offset, run = [], None, [], start, []
    for place, token in enumerate([*tokens, None]):
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
            text.append(place)
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
    timed: list[Timed] | None = None,
) -> list[Transcript]:
    """The pieces' decodings put together into one Transcript a recording, times in its seconds; with `timed`
    (piece_times', a piece each) each segment's words."""
    found: list[list[Segment]] = [[] for _ in pieces.durations]
    for index, (owner, (begin, end), row) in enumerate(zip(pieces.recording, pieces.spans, tokens)):
        seek = begin // HOP
        for start, stop, places in segment_places(row, first, begin / SAMPLE_RATE, end / SAMPLE_RATE, timestamps):
            ids = [row[place] for place in places]
            text = speech.decode(ids, skip_special_tokens=True)
            words = (
                () if timed is None else tuple(words_of(timed[index], places, speech, begin / SAMPLE_RATE, language))
            )
            segment = Segment(len(found[owner]), round(start, 3), round(stop, 3), text, tuple(ids), seek, words=words)
            found[owner].append(segment)
    return [
        Transcript(
            " ".join(s.text.strip() for s in segments if s.text.strip()), tuple(segments), duration, language, task
        )
        for segments, duration in zip(found, pieces.durations)
    ]


def piece_times(
    model, pieces: Pieces, start: int, tokens: list[list[int]], defaults=None, features=None, **options
) -> list[Timed]:
    """Pieces start.. of `pieces`, decoded by `generate(model, ..., defaults=defaults, **options)` into `tokens`
    (its rows, trimmed), timed by teacher-forced passes (word_times.token_timestamps over the frames that hold
    each piece), as many pieces a pass as keep its attention maps within MAP_BYTES: each one's decoder sequence
    (the prompt generate decoded after, its tokens, <|endoftext|>), its tokens' times and probabilities.
    `features`: the pieces' log-mels where the caller has them (the decoding's), else made here."""
    stop = start + len(tokens)
    features = pieces.features(start, stop) if features is None else features
    job = prepare(model, features, None, defaults=defaults, **options)  # the prompts, as generate made them
    prompts, eos = job.prompt.tolist(), job.cfg.eos_ids[0]
    sequences = [[*prompt, *row, eos] for prompt, row in zip(prompts, tokens)]
    at_once = max(MAP_BYTES // map_bytes(model, max(map(len, sequences)), pieces.frames), 1)
    timed = []
    for first in range(0, len(sequences), at_once):
        batch = sequences[first : first + at_once]
        width = max(map(len, batch))
        ids = torch.tensor([s + [eos] * (width - len(s)) for s in batch], dtype=torch.long, device=job.device)
        frames = [pieces.held(start + first + row) for row in range(len(batch))]
        window = job.src_ids[first : first + at_once]
        lengths = [len(sequence) for sequence in batch]
        times = token_timestamps(model, window, ids, len(prompts[0]), frames=frames, lengths=lengths)
        seconds, chances = times.seconds.tolist(), times.probabilities.tolist()
        timed += [
            Timed(len(prompts[0]), eos, sequence, seconds[row][: len(sequence)], chances[row][: len(sequence)])
            for row, sequence in enumerate(batch)
        ]
    return timed


def map_bytes(model, tokens: int, frames: int) -> int:
    """The attention maps one piece's timing pass records: each alignment layer's heads (B, H, T, S) in fp32."""
    cross = model.attention_layers().cross
    layers = {layer for layer, _ in alignment_heads(model)}
    return sum(cross[layer].n_heads for layer in layers) * tokens * (frames // 2) * 4


def words_of(timed: Timed, places: list[int], speech: SpeechText, offset: float, language) -> list[Word]:
    """A segment's words: its text tokens (`places` in its piece's tokens, in order) with the times `timed` gave
    them, offset by the piece's start (seconds); the first word starts at the time of the token before it."""
    lo, hi = timed.prompt + places[0], timed.prompt + places[-1] + 1
    return word_timestamps(
        speech,
        timed.sequence[lo:hi],
        timed.seconds[lo:hi],
        timed.probabilities[lo:hi],
        language=language,
        offset=offset,
        eos_id=timed.eos,
        begins=timed.seconds[lo - 1],
    )


def transcribe_batched(
    model,
    speech: SpeechText,
    recordings: Sequence[Recording],
    defaults: dict | None = None,
    batch_pieces: int = BATCH_PIECES,
    max_seconds: float = MAX_SECONDS,
    chunk_length: float | None = None,
    speech_pad: float = SPEECH_PAD,
    word_timestamps: bool = False,
    **options,
) -> list[Transcript]:
    """One Transcript for each recording (a path, a file's bytes, a 16 kHz wave): cut at its pauses into pieces
    of at most `chunk_length` seconds (None: the model's window; more is a ConfigError), its speech padded by
    `speech_pad` seconds a side (faster-whisper's 0.4; see transcription.segmentation), every piece of every
    recording decoded `batch_pieces` at a time by `generate(model, ..., **options)` (Whisper's options:
    language, task, return_timestamps, prompt_ids, temperature ...), over `defaults` (a checkpoint's); with
    `word_timestamps` each segment's words (the module's docstring)."""
    chunk_length = chunk_length_of(chunk_length, speech)
    waves = [waveform(recording, max_seconds) for recording in recordings]
    pieces = pieces_of(waves, speech, chunk_length, speech_pad)
    cfg = resolve_config(model, dict(options), defaults)
    if cfg.whisper is None:
        raise ConfigError("batched transcription needs a Whisper's decoding rules, which this model has none of")
    first, pad = cfg.whisper.timestamp_begin, cfg.pad_token_id
    tokens, timed = [], [] if word_timestamps else None
    for at in range(0, len(pieces.spans), batch_pieces):
        features = pieces.features(at, at + batch_pieces)
        out = generate(model, features, defaults=defaults, **options)
        tokens += [trimmed(row, pad) for row in out.tolist()]
        if word_timestamps:
            timed += piece_times(model, pieces, at, tokens[at:], defaults, features, **options)
    task, language = cfg.task or "transcribe", options.get("language")
    return transcripts_of(pieces, tokens, speech, first, bool(cfg.return_timestamps), task, language, timed)


def trimmed(row: list[int], pad: int) -> list[int]:
    """A row of generate's Whisper output without its right padding (the pad id, never a kept token)."""
    end = len(row)
    while end and row[end - 1] == pad:
        end -= 1
    return row[:end]
