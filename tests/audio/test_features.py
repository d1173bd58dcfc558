"""encdec.audio.log_mel: Whisper's log-mel front end, within 1e-4 of transformers' WhisperFeatureExtractor on real
speech spoken by espeak-ng, at 80 and 128 bins, on a padded batch of different lengths (one cut at 30 s)."""

import shutil
import subprocess

import numpy as np
import pytest
import torch

from encdec.audio import N_FRAMES, frame_lengths, log_mel, read_audio_bytes
from encdec.audio.features import mel_filters
from encdec.errors import ConfigError

transformers = pytest.importorskip("transformers")
pytest.importorskip("soundfile")
pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = [
    "The little dog ran to the park.",
    "Two men play football in the snow near a tall tree, while a girl in a red coat watches them.",
    "Hi.",
]


def speak(text: str, voice: str = "en-us") -> torch.Tensor:
    """`text` spoken by espeak-ng (22,050 Hz) and read at 16 kHz."""
    spoken = subprocess.run(
        ["espeak-ng", "-v", voice, "--stdout"], input=text.encode(), capture_output=True, check=True
    )
    return read_audio_bytes(spoken.stdout)


@pytest.fixture(scope="module")
def waves() -> list[torch.Tensor]:
    """Three sentences of different lengths and a 31-second recording (the sentences over and over), cut at 30 s."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt install espeak-ng); the front end is checked on its speech")
    spoken = [speak(text, voice) for text, voice in zip(SENTENCES, ["en-us", "en-gb-scotland", "en-us+f3"])]
    long = torch.cat(spoken * 8)[: 31 * 16_000]
    assert len(long) == 31 * 16_000
    return [*spoken, long]


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("batch", ["short", "with 31 s"])
def test_log_mel_equals_whisper_s_feature_extractor_on_a_padded_batch(waves, n_mels, batch, device):
    """Short clips alone (transformed as far as the longest, the rest zeros) and beside one cut at 30 s."""
    waves = waves[:3] if batch == "short" else waves
    extractor = transformers.WhisperFeatureExtractor(feature_size=n_mels)
    expected = extractor(
        [wave.numpy() for wave in waves], sampling_rate=16_000, return_tensors="pt", return_attention_mask=True
    )
    got = log_mel([wave.to(device) for wave in waves], n_mels=n_mels)
    assert got.shape == (len(waves), n_mels, N_FRAMES) and got.device.type == device.type
    assert (got.cpu() - expected.input_features).abs().max().item() < 1e-4
    assert frame_lengths(waves).tolist() == expected.attention_mask.sum(dim=1).tolist()


def test_a_shorter_window_equals_the_feature_extractor_of_that_chunk_length(waves):
    """A Whisper-shaped model of 500 source positions reads 10 s windows: chunk_length 10, 1000 frames."""
    extractor = transformers.WhisperFeatureExtractor(feature_size=80, chunk_length=10)
    expected = extractor(
        [w.numpy() for w in waves], sampling_rate=16_000, return_tensors="pt", return_attention_mask=True
    )
    got = log_mel(waves, frames=1000)
    assert got.shape == (len(waves), 80, 1000)
    assert (got - expected.input_features).abs().max().item() < 1e-4
    assert frame_lengths(waves, frames=1000).tolist() == expected.attention_mask.sum(dim=1).tolist()
    with pytest.raises(ConfigError, match="frames must be from 1 to 720,000"):
        log_mel(waves, frames=720_001)


def test_the_filter_bank_is_transformers_slaney_bank(device):
    from transformers.audio_utils import mel_filter_bank

    for n_mels in (80, 128):
        expected = mel_filter_bank(201, n_mels, 0.0, 8000.0, 16_000, norm="slaney", mel_scale="slaney")
        got = mel_filters(n_mels, device)
        assert got.device.type == device.type
        assert np.abs(got.cpu().numpy() - expected.T.astype(np.float32)).max() < 1e-7
    assert mel_filters(80, device) is mel_filters(80, device)  # cached per (n_mels, device)


def test_a_batch_equals_its_waves_one_by_one(waves):
    batch = log_mel(waves[:3])
    alone = torch.cat([log_mel(wave) for wave in waves[:3]])
    assert torch.allclose(batch, alone, atol=1e-6)
    stacked = torch.stack([waves[0], waves[0].flip(0)])  # a (B, N) tensor is a batch of rows
    assert torch.allclose(log_mel(stacked)[0], batch[0], atol=1e-6)


def test_the_valid_frames_count_the_wave_not_the_padding():
    waves = [torch.zeros(0), torch.zeros(1), torch.zeros(160), torch.zeros(161), torch.zeros(40 * 16_000)]
    assert frame_lengths(waves).tolist() == [0, 1, 1, 2, N_FRAMES]


def test_bins_beyond_whisper_s_and_waves_that_are_not_1d_are_one_sentence():
    with pytest.raises(ConfigError, match="n_mels must be from 1 to 128"):
        log_mel([torch.zeros(16)], n_mels=200)
    with pytest.raises(ConfigError, match=r"wave 1 must be a 1-D floating tensor of samples, got \(2, 3\)"):
        log_mel([torch.zeros(16), torch.zeros(2, 3)])
    with pytest.raises(ConfigError, match="at least one wave"):
        log_mel([])
