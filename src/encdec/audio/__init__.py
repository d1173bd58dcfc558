"""Audio in: recordings read and resampled to 16 kHz mono (`recordings.py`) and Whisper's log-mel front end
(`features.py`), the two steps between a file and a speech model's input features.

    wave = read_audio("clip.flac")                   # (N,) float32 at 16 kHz, or one DataError sentence
    features = log_mel([wave, other], n_mels=80)     # (B, 80, 3000) on the waves' device
    lengths = frame_lengths([wave, other])           # (B,) frames that are not padding
"""

from encdec.audio.features import HOP, N_FRAMES, frame_lengths, log_mel
from encdec.audio.recordings import MAX_SECONDS, SAMPLE_RATE, read_audio, read_audio_bytes

__all__ = [
    "HOP",
    "MAX_SECONDS",
    "N_FRAMES",
    "SAMPLE_RATE",
    "frame_lengths",
    "log_mel",
    "read_audio",
    "read_audio_bytes",
]
