"""Audio read with bounds: a file or bytes in memory as a float32 mono waveform at 16 kHz, or one sentence.

What reads what: soundfile (libsndfile) decodes WAV (and its WAVEX, RF64 and W64 forms), FLAC and Ogg
(Vorbis and Opus) with any of its wheels; MP3 needs libsndfile 1.1 or later, which the wheels of
soundfile >= 0.12 carry (`MP3` in `soundfile.available_formats()`). Anything else is refused by name: a
format libsndfile knows but encdec does not read (AIFF, AU, ...) and the containers it cannot open at all
(MP4 / M4A, WebM / Matroska, ASF / WMA, AMR), so convert such a file first (`ffmpeg -i IN out.flac`).
Channels are averaged to mono, then soxr resamples to 16 kHz (its default high quality, streamed block by
block so that memory holds the result and one block, never the file's samples at their own rate).

Bounds come before decoding, from the header: the file's size (MAX_FILE_BYTES), its channels, its sample
rate (MIN_RATE to MAX_RATE) and its length against `max_seconds` (a 10-hour file is one sentence, not a
blown allocation). The length is bounded again while decoding, for formats whose header only estimates it.
Refusals are one sentence each (DataError): missing, a directory or device, empty (0 bytes or 0 frames),
not audio, a format not read, NaN or infinite samples, too long, a rate out of range. 8-bit PCM (unsigned
in WAV, signed in others) is read as libsndfile scales it, level for level equal to the same audio in 16 bits.

A path a user names is read as `encdec.data.reading` reads a corpus file: a symlink to a regular file is
followed (the user named it), a dangling one is "does not exist" and one to a FIFO or device is refused; a
name read from inside a file (a manifest's audio column) is the caller's to confine first, with
`encdec.safe_paths.inside`, which refuses a symlink on the way.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from encdec.errors import ConfigError, DataError

SAMPLE_RATE = 16_000  # what every waveform read here is resampled to: Whisper's rate
MAX_SECONDS = 2 * 3600.0  # the default bound on a recording's length: two hours, 461 MB as float32 at 16 kHz
MAX_FILE_BYTES = 4 << 30  # 4 GiB, a WAV file's own limit
MIN_RATE, MAX_RATE = 8_000, 192_000  # sample rates read: telephone speech to studio audio
MAX_CHANNELS = 64
BLOCK_FRAMES = 1 << 16  # frames decoded, mixed and resampled at a time
READ_FORMATS = {"WAV", "WAVEX", "RF64", "W64", "FLAC", "OGG", "MP3"}  # soundfile's names: WAV's forms, FLAC, Ogg, MP3
READ_NAMES = "wav, flac, ogg (Vorbis, Opus) and mp3"

# magic bytes of containers libsndfile does not open, so such a file is named for what it is, not "not audio"
CONTAINERS = (
    (4, b"ftyp", "an MP4 / M4A file (AAC or ALAC audio)"),
    (0, b"\x1a\x45\xdf\xa3", "a WebM / Matroska file"),
    (0, b"\x30\x26\xb2\x75\x8e\x66\xcf\x11", "an ASF / WMA file"),
    (0, b"#!AMR", "an AMR file"),
)


def read_audio(path: str | Path, max_seconds: float = MAX_SECONDS) -> torch.Tensor:
    """The recording at `path` as a float32 mono waveform at 16 kHz, shape (N,); one sentence (DataError)
    where it is missing, not a regular file, not audio encdec reads, or out of the bounds above."""
    name = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)  # a FIFO does not block
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise DataError(f"audio file {name} does not exist") from None
    except OSError as error:
        raise DataError(f"cannot read audio file {name}: {error.strerror}") from None
    facts = os.fstat(fd)
    if not stat.S_ISREG(facts.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(facts.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise DataError(f"audio file {name} is {kind}; encdec reads only regular files")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        return _decode(handle, facts.st_size, f"audio file {name}", max_seconds)


def read_audio_bytes(data: bytes, max_seconds: float = MAX_SECONDS, name: str = "the audio data") -> torch.Tensor:
    """`data` (a file's bytes, an HTTP upload) as read_audio reads a file; `name` says what it is in a refusal."""
    return _decode(io.BytesIO(data), len(data), name, max_seconds)


def _decode(stream: BinaryIO, size: int, name: str, max_seconds: float) -> torch.Tensor:
    """The bounds checked on the size and header, then the samples decoded, mixed and resampled by blocks."""
    soundfile = _speech_package("soundfile")
    if not (isinstance(max_seconds, (int, float)) and 0 < max_seconds < float("inf")):
        raise ConfigError(f"max_seconds must be a positive number of seconds, got {max_seconds!r}")
    if size == 0:
        raise DataError(f"{name} is empty (0 bytes)")
    if size > MAX_FILE_BYTES:
        raise DataError(f"{name} is {size:,} bytes, more than the {MAX_FILE_BYTES:,} encdec reads")
    head = stream.read(16)
    stream.seek(0)
    try:
        sound = soundfile.SoundFile(stream)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
        said = next((what for at, magic, what in CONTAINERS if head[at : at + len(magic)] == magic), None)
        if said:
            raise DataError(f"{name} is {said}, which soundfile cannot read; convert it (ffmpeg -i IN out.flac)")
        raise DataError(f"{name} is not a recording soundfile decodes ({_reason(error)}); encdec reads {READ_NAMES}")
    with sound:
        _check_header(sound, name, max_seconds)
        return _samples(sound, name, max_seconds)


def _speech_package(name: str):
    """soundfile or soxr, imported; one sentence where the speech extra is not installed."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise DataError(f"reading audio needs {name}; install it with `pip install encdec[speech]`") from None


def _reason(error: Exception) -> str:
    """libsndfile's words for why it stopped, short; its "File does not exist" for data it cannot place said so."""
    text = str(error).split(":")[-1].strip().rstrip(".")
    if "does not exist" in text:  # what libsndfile (1.2) says of an MP3 stream it loses sync in at once
        return "no format recognised"
    return text[:120] or type(error).__name__


def _check_header(sound, name: str, max_seconds: float) -> None:
    """The format, channels, rate and length the header declares, each against its bound."""
    if sound.format not in READ_FORMATS:
        raise DataError(f"{name} is {sound.format} audio; encdec reads {READ_NAMES}, so convert it first")
    if not 1 <= sound.channels <= MAX_CHANNELS:
        raise DataError(f"{name} has {sound.channels} channels; encdec reads 1 to {MAX_CHANNELS}")
    if not MIN_RATE <= sound.samplerate <= MAX_RATE:
        raise DataError(f"{name} is sampled at {sound.samplerate:,} Hz; encdec reads {MIN_RATE:,} to {MAX_RATE:,} Hz")
    if sound.frames == 0:
        raise DataError(f"{name} holds no audio (0 samples)")
    seconds = sound.frames / sound.samplerate
    if seconds > max_seconds:
        raise DataError(f"{name} lasts {_duration(seconds)}, longer than the {_duration(max_seconds)} allowed")


def _samples(sound, name: str, max_seconds: float) -> torch.Tensor:
    """The decoded frames averaged to mono and resampled to 16 kHz, a block at a time."""
    soxr = _speech_package("soxr")

    rate, most = sound.samplerate, int(max_seconds * sound.samplerate)
    stream = None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32")
    pieces, done = [], 0
    while True:
        try:
            block = sound.read(BLOCK_FRAMES, dtype="float32", always_2d=True)  # (frames, channels)
        except RuntimeError as error:  # soundfile.LibsndfileError: a stream corrupt or cut short mid-way
            raise DataError(f"{name} cannot be decoded after {done / rate:.2f} s ({_reason(error)})") from None
        last = len(block) < BLOCK_FRAMES
        mono = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0]
        if not np.isfinite(mono).all():
            at = done + int(np.argmin(np.isfinite(mono)))
            raise DataError(f"{name} holds a NaN or infinite sample at {at / rate:.2f} s; it is not a recording")
        done += len(mono)
        if done > most:
            raise DataError(f"{name} lasts longer than the {_duration(max_seconds)} allowed (read past its header)")
        pieces.append(mono.copy() if stream is None else stream.resample_chunk(mono, last=last))
        if last:
            break
    if done == 0:
        raise DataError(f"{name} holds no audio (0 samples)")
    return torch.from_numpy(np.concatenate(pieces))


def _duration(seconds: float) -> str:
    """Seconds in words a person reads at a glance: 90 s, 12.5 min, 10.0 h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
