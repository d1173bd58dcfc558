"""Recordings in, text out: a speech model's input encoding, in the place a text model's tokenizer takes.

`SpeechText` is what `RunTokenizer` is to a text run (and Hugging Face's WhisperProcessor to Whisper): the one
text generator (generation.text_generator) calls it with a batch of inputs and gets the model's encoder
input back, then decodes the generated ids through it. A speech model's inputs are recordings: a file's path
(what a line of `encdec generate`'s input names, a manifest's recording), its bytes (an upload, a `datasets`
Audio column) or a waveform at 16 kHz; each is read with encdec.audio's bounds (one sentence for a bad file)
and made into log-mel features of the model's bins and window (`model.audio`: n_mels, and twice its
max_source_positions frames). There is no attention mask: Whisper's encoder reads every frame.
"""

from collections.abc import Sequence

import torch

from encdec.audio import HOP, SAMPLE_RATE, log_mel, read_audio, read_audio_bytes
from encdec.audio.recordings import MAX_SECONDS
from encdec.errors import DataError
from encdec.models import ModelConfig
from encdec.models.model_config import SPEECH_FAMILIES

Recording = str | bytes | torch.Tensor  # a path, a file's bytes, or a waveform (N,) at 16 kHz


def waveform(recording: Recording, max_seconds: float = MAX_SECONDS) -> torch.Tensor:
    """One recording as a float waveform at 16 kHz."""
    if isinstance(recording, torch.Tensor):
        return recording
    if isinstance(recording, bytes):
        return read_audio_bytes(recording, max_seconds, name=f"a recording of {len(recording):,} bytes")
    return read_audio(recording, max_seconds)


class SpeechText:
    """A speech model's inputs and outputs behind the part of Hugging Face's tokenizer interface the text
    generator uses: `__call__` makes features of recordings, `batch_decode` / `decode` are `text`'s (the run's
    RunTokenizer, or a Hugging Face directory's tokenizer)."""

    def __init__(self, text, n_mels: int, frames: int, max_seconds: float):
        self.text, self.n_mels, self.frames, self.max_seconds = text, n_mels, frames, max_seconds

    def __call__(
        self, recordings: Sequence[Recording], return_tensors: str = "pt", src_lang: str | None = None, **_
    ) -> dict:
        """{"input_ids": log-mel features (B, n_mels, frames), "attention_mask": None} of `recordings`, each cut
        to the model's window (a longer one is refused: transcribing long recordings by windows is its own
        command)."""
        if src_lang is not None:
            raise DataError("src_lang places a text's language code; a speech model's language is a prompt token")
        if not recordings:
            raise DataError("there are no recordings to transcribe")
        waves = [waveform(recording, self.max_seconds) for recording in recordings]
        return {"input_ids": log_mel(waves, self.n_mels, frames=self.frames), "attention_mask": None}

    def batch_decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(row, skip_special_tokens) for row in ids]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.text.decode(ids, skip_special_tokens=skip_special_tokens)


def input_encoding(cfg: ModelConfig, text):
    """The inputs' encoding of the model `cfg` describes: `text` (a run's RunTokenizer, a Hugging Face tokenizer)
    for a text model; for a speech model, SpeechText of its bins and window around it."""
    if cfg.family not in SPEECH_FAMILIES:
        return text
    frames = 2 * cfg.audio.max_source_positions
    return SpeechText(text, cfg.audio.n_mels, frames, frames * HOP / SAMPLE_RATE)
