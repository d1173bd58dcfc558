"""Whisper's log-mel front end in torch, on the waves' device, batched: equal to transformers'
WhisperFeatureExtractor (its torch path) within float error.

Shapes: B batch, N samples (at 16 kHz), F = 201 frequency bins, M mel bins, T = 3000 frames.

Each wave is cut or padded with zeros to 30 s (480,000 samples); a 400-sample (25 ms) Hann-windowed STFT every
160 samples (10 ms), centred with reflection padding as torch.stft does, gives 3001 frames, of which the last is
dropped. The transform runs only as far as the longest wave of the batch (and one window beyond): a frame whose
window holds only padding has no power, whatever its place, so it is written as zeros instead of computed (a
batch of 3-second clips costs a tenth of thirty seconds). The power spectrum goes through Slaney's mel filters (area-normalised triangles on Slaney's mel scale,
0 to 8 kHz, as librosa's `filters.mel(norm="slaney")`), then log10 clamped at 1e-10, floored at each example's
maximum minus 8 and mapped by (x + 4) / 4 (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak
Supervision", section 2.2; openai-whisper's audio.py).

The filter bank is computed here by hand, in float64 then cast to float32 as transformers casts its own, instead
of through torchaudio: torchaudio would be a dependency (and a build matched to torch's) for one 201 x M matrix,
and its `melscale_fbanks` triangulates in mel space unless told otherwise, which is not Whisper's bank.
"""

from __future__ import annotations

import functools
import math

import torch

from encdec.audio.recordings import MAX_SECONDS, SAMPLE_RATE
from encdec.errors import ConfigError

N_FFT = 400  # 25 ms at 16 kHz
HOP = 160  # 10 ms
CHUNK_SAMPLES = 30 * SAMPLE_RATE  # every wave is cut or padded to 30 s
N_FRAMES = CHUNK_SAMPLES // HOP  # 3000
MAX_FRAMES = int(MAX_SECONDS * SAMPLE_RATE) // HOP  # a whole recording's, read window by window (transcription)
MAX_MELS = 128  # large-v3's bins; above ~150, Slaney triangles narrower than a frequency bin come out empty


def log_mel(
    waves: list[torch.Tensor] | torch.Tensor, n_mels: int = 80, device=None, frames: int = N_FRAMES
) -> torch.Tensor:
    """Log-mel spectrograms (B, M, frames) of `waves` (a list of (N,) tensors of any lengths, a (B, N) tensor or
    one (N,) wave) at 16 kHz, computed on `device` (default: the first wave's), float32. `frames` is the window:
    Whisper's 3000 (30 s), or a shorter one a Whisper-shaped model of fewer source positions reads (1000: 10 s,
    WhisperFeatureExtractor's chunk_length 10), or a whole recording's (up to MAX_FRAMES, two hours), which long-form
    transcription reads window by window as transformers' extractor gives it (truncation=False)."""
    if not 1 <= n_mels <= MAX_MELS:
        raise ConfigError(f"n_mels must be from 1 to {MAX_MELS} (Whisper uses 80 and 128), got {n_mels}")
    if not (isinstance(frames, int) and 1 <= frames <= MAX_FRAMES):
        raise ConfigError(
            f"frames must be from 1 to {MAX_FRAMES:,} (two hours; a window is {N_FRAMES}), got {frames!r}"
        )
    waves = _as_list(waves)
    device = torch.device(device) if device is not None else waves[0].device
    chunk = frames * HOP
    longest = max(min(len(wave), chunk) for wave in waves)
    span = min(chunk, -(-(longest + N_FFT) // HOP) * HOP)  # every frame after it sees zeros alone
    batch = torch.zeros(len(waves), span, device=device)  # (B, span): silence after each wave
    for row, wave in zip(batch, waves):
        cut = wave[:span]
        row[: len(cut)] = cut.to(device, torch.float32)
    window = torch.hann_window(N_FFT, device=device)
    stft = torch.stft(batch, N_FFT, HOP, window=window, return_complex=True)  # (B, F, span / HOP + 1)
    power = stft[..., : span // HOP].abs() ** 2  # (B, F, T') where T' <= T
    mel = torch.zeros(len(waves), n_mels, frames, device=device)  # (B, M, T): a frame of zeros has no power
    mel[..., : span // HOP] = mel_filters(n_mels, device) @ power
    log_spec = mel.clamp(min=1e-10).log10()
    floor = log_spec.amax(dim=(1, 2), keepdim=True) - 8.0  # (B, 1, 1): each example's own dynamic range
    return (torch.maximum(log_spec, floor) + 4.0) / 4.0


def frame_lengths(waves: list[torch.Tensor] | torch.Tensor, frames: int = N_FRAMES) -> torch.Tensor:
    """The frames of each log-mel row that hold its wave rather than padding, (B,) int64: ceil(N / 160) up to
    `frames`, as WhisperFeatureExtractor's attention mask counts them."""
    waves = _as_list(waves)
    return torch.tensor([min(math.ceil(len(wave) / HOP), frames) for wave in waves], dtype=torch.long)


def _as_list(waves: list[torch.Tensor] | torch.Tensor) -> list[torch.Tensor]:
    """The waves one by one, each checked to be a 1-D floating tensor."""
    if isinstance(waves, torch.Tensor):
        waves = [waves] if waves.dim() == 1 else list(waves)
    if not waves:
        raise ConfigError("log_mel needs at least one wave")
    for i, wave in enumerate(waves):
        if not isinstance(wave, torch.Tensor) or wave.dim() != 1 or not wave.is_floating_point():
            shape = tuple(wave.shape) if isinstance(wave, torch.Tensor) else type(wave).__name__
            raise ConfigError(f"wave {i} must be a 1-D floating tensor of samples, got {shape}")
    return waves


@functools.lru_cache(maxsize=16)
def mel_filters(n_mels: int, device: torch.device) -> torch.Tensor:
    """Slaney's mel filter bank (M, F) for 16 kHz and a 400-point FFT, float32 on `device`; cached per
    (n_mels, device). librosa's `filters.mel(sr=16000, n_fft=400, n_mels=M)`, as transformers' mel_filter_bank
    builds it (audio_utils.py): triangles between M + 2 points evenly spaced in mel, each scaled by 2 / width."""
    fft_freqs = torch.linspace(0, SAMPLE_RATE // 2, N_FFT // 2 + 1, dtype=torch.float64)  # (F,)
    mels = torch.linspace(0.0, _hz_to_mel(SAMPLE_RATE / 2), n_mels + 2, dtype=torch.float64)
    edges = _mel_to_hz(mels)  # (M + 2,) Hz
    widths = edges.diff()  # (M + 1,)
    slopes = edges[None, :] - fft_freqs[:, None]  # (F, M + 2)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    bank = torch.minimum(down, up).clamp(min=0.0)  # (F, M)
    bank = bank * (2.0 / (edges[2:] - edges[:-2]))  # Slaney's area normalisation
    return bank.T.to(device, torch.float32).contiguous()  # (M, F)


# Slaney's mel scale (Auditory Toolbox): linear below 1 kHz (3 mel per 200 Hz), logarithmic above
MIN_LOG_HZ, MIN_LOG_MEL, LOG_STEP = 1000.0, 15.0, math.log(6.4) / 27.0


def _hz_to_mel(hz: float) -> float:
    return 3.0 * hz / 200.0 if hz < MIN_LOG_HZ else MIN_LOG_MEL + math.log(hz / MIN_LOG_HZ) / LOG_STEP


def _mel_to_hz(mels: torch.Tensor) -> torch.Tensor:
    linear = 200.0 * mels / 3.0
    return torch.where(mels >= MIN_LOG_MEL, MIN_LOG_HZ * torch.exp(LOG_STEP * (mels - MIN_LOG_MEL)), linear)
