"""What the transcription and server tests share: real speech made here with espeak-ng (sentences joined by
pauses of known places), and a tiny random Whisper-shaped Hugging Face directory with a real WhisperTokenizer
(scripts/whisper_model.py's, its model shrunk to d_model 16, one layer a side, a 4 s window, 48 target
positions, its generation_config.json's max_length 20, so a random decoding stops within a few steps)."""

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from encdec.audio import SAMPLE_RATE, read_audio_bytes

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "whisper_model.py"
SENTENCES = ["A dog runs in the snow.", "Two men sit on a bench.", "The girl reads a book.", "A cat sleeps."]
WINDOW_SECONDS = 4
TINY = dict(
    num_mel_bins=80,
    d_model=16,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_source_positions=WINDOW_SECONDS * 50,
    max_target_positions=48,
)

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def tiny_whisper_dir(path: Path, seed: int = 0) -> Path:
    """scripts/whisper_model.py's directory (tokenizer, feature extractor, generation_config.json) at TINY's
    size, its weights drawn large enough that each input gives tokens of its own."""
    spec = importlib.util.spec_from_file_location("whisper_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.MODEL.update(TINY)
    module.build(path, SENTENCES * 30, 300, seed)
    import transformers

    model = transformers.WhisperForConditionalGeneration.from_pretrained(path)
    with torch.no_grad():
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
    model.save_pretrained(path)
    generation = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps(generation | {"max_length": 20}))
    return path


def speak(text: str, voice: str = "en", rate: int = 175) -> torch.Tensor:
    """`text` spoken by espeak-ng, (N,) float32 at 16 kHz, its own leading and trailing silence cut off."""
    spoken = subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "--stdout", text], capture_output=True)
    wave = read_audio_bytes(spoken.stdout)
    loud = (wave.abs() > 1e-3).nonzero()
    return wave[loud[0, 0] : loud[-1, 0] + 1]


def with_pauses(sentences: list[str], pause_seconds: float = 0.8, voice: str = "en") -> tuple[torch.Tensor, list]:
    """The sentences spoken one after another, `pause_seconds` of silence between them -> (wave, the pauses as
    (start, end) samples)."""
    parts, pauses, at = [], [], 0
    silence = torch.zeros(round(pause_seconds * SAMPLE_RATE))
    for i, sentence in enumerate(sentences):
        if i:
            parts.append(silence)
            pauses.append((at, at + len(silence)))
            at += len(silence)
        wave = speak(sentence, voice)
        parts.append(wave)
        at += len(wave)
    return torch.cat(parts), pauses


def wav_bytes(wave: torch.Tensor) -> bytes:
    """A 16-bit PCM WAV file of `wave` (16 kHz)."""
    import io

    import soundfile

    out = io.BytesIO()
    soundfile.write(out, np.asarray(wave.numpy()), SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return out.getvalue()
