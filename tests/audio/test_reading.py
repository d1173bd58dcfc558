"""encdec.audio.read_audio and read_audio_bytes: a recording as float32 mono at 16 kHz, resampled by soxr; every
bad file one sentence (DataError), its bounds checked from the header before anything is decoded."""

import io
import os
import sys

import numpy as np
import pytest
import torch

from encdec.audio import SAMPLE_RATE, read_audio, read_audio_bytes
from encdec.errors import ConfigError, DataError
from tests.audio.bad_audio_kit import bad_recordings, wav_header

soundfile = pytest.importorskip("soundfile")
soxr = pytest.importorskip("soxr")


def tone(seconds: float = 0.5, rate: int = SAMPLE_RATE, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def written(path, samples: np.ndarray, rate: int = SAMPLE_RATE, **kwargs):
    soundfile.write(path, samples, rate, **kwargs)
    return path


def encoded(samples: np.ndarray, rate: int = SAMPLE_RATE, **kwargs) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, **kwargs)
    return buffer.getvalue()


def refusal(read, *args, **kwargs) -> str:
    """The one sentence `read` refuses with."""
    with pytest.raises(DataError) as caught:
        read(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 280 and message.count(". ") == 0, message
    return message


def test_a_16_khz_mono_wav_reads_as_its_samples(tmp_path):
    samples = tone()
    wave = read_audio(written(tmp_path / "a.wav", samples, subtype="FLOAT"))
    assert wave.dtype == torch.float32 and wave.shape == (len(samples),)
    assert torch.equal(wave, torch.from_numpy(samples))


def test_another_rate_is_resampled_by_soxr_to_16_khz(tmp_path):
    samples = tone(1.3, 44_100)
    wave = read_audio(written(tmp_path / "a.wav", samples, 44_100, subtype="FLOAT"))
    expected = soxr.resample(samples, 44_100, SAMPLE_RATE)  # soxr in one call: the blocks change nothing
    assert wave.shape == (round(len(samples) * SAMPLE_RATE / 44_100),)
    assert np.array_equal(wave.numpy(), expected)
    spectrum = np.abs(np.fft.rfft(wave.numpy()))
    assert abs(np.argmax(spectrum) * SAMPLE_RATE / len(wave) - 440.0) < 1.0  # the tone kept its pitch


def test_channels_are_averaged_to_mono(tmp_path):
    left, right = tone(hz=440.0), tone(hz=660.0)
    wave = read_audio(written(tmp_path / "a.wav", np.stack([left, right], axis=1), subtype="FLOAT"))
    assert torch.allclose(wave, torch.from_numpy((left + right) / 2), atol=1e-7)


def test_bytes_in_memory_read_as_the_same_file(tmp_path):
    samples = tone(0.7, 22_050)
    path = written(tmp_path / "a.flac", samples, 22_050)
    assert torch.equal(read_audio_bytes(path.read_bytes()), read_audio(path))


@pytest.mark.parametrize("kind", [("wav", "PCM_16"), ("flac", "PCM_24"), ("ogg", "VORBIS"), ("ogg", "OPUS")])
def test_wav_flac_and_ogg_are_read(tmp_path, kind):
    suffix, subtype = kind
    if subtype not in soundfile.available_subtypes(suffix.upper()):
        pytest.skip(f"this libsndfile writes no {subtype}")
    rate = 48_000 if subtype == "OPUS" else 22_050
    wave = read_audio(written(tmp_path / f"a.{suffix}", tone(1.0, rate), rate, subtype=subtype))
    assert abs(len(wave) - SAMPLE_RATE) < SAMPLE_RATE // 20 and wave.abs().max() > 0.3


def test_mp3_is_read_where_libsndfile_has_it(tmp_path):
    if "MP3" not in soundfile.available_formats():
        pytest.skip(f"libsndfile {soundfile.__libsndfile_version__} reads no MP3 (1.1 or later does)")
    wave = read_audio(written(tmp_path / "a.mp3", tone(1.0, 22_050), 22_050, format="MP3"))
    assert abs(len(wave) - SAMPLE_RATE) < SAMPLE_RATE // 10 and wave.abs().max() > 0.3


@pytest.mark.parametrize("format, subtype", [("WAV", "PCM_U8"), ("FLAC", "PCM_S8")])
def test_8_bit_pcm_reads_equal_to_the_same_levels_in_16_bits(tmp_path, format, subtype):
    levels = np.round(tone() * 127) / 128  # values 8 bits hold exactly
    eight = read_audio(written(tmp_path / "eight", levels, format=format, subtype=subtype))
    sixteen = read_audio(written(tmp_path / "sixteen", levels, format=format, subtype="PCM_16"))
    assert torch.equal(eight, sixteen) and torch.equal(eight, torch.from_numpy(levels.astype(np.float32)))


def test_a_missing_file_is_one_sentence(tmp_path):
    assert refusal(read_audio, tmp_path / "none.wav") == f"audio file {tmp_path / 'none.wav'} does not exist"


def test_an_empty_file_and_one_of_no_samples_are_one_sentence_each(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    assert refusal(read_audio, tmp_path / "empty.wav").endswith("is empty (0 bytes)")
    silent = written(tmp_path / "none.wav", np.zeros(0, np.float32))
    assert refusal(read_audio, silent).endswith("holds no audio (0 samples)")
    assert refusal(read_audio_bytes, b"").endswith("is empty (0 bytes)")


def test_text_and_other_containers_are_not_audio_in_one_sentence(tmp_path):
    (tmp_path / "notes.wav").write_text("these are not samples\n" * 10)
    assert "is not a recording soundfile decodes" in refusal(read_audio, tmp_path / "notes.wav")
    m4a = b"\x00\x00\x00\x20ftypM4A " + bytes(200)
    assert "is an MP4 / M4A file" in refusal(read_audio_bytes, m4a, name="upload.m4a")
    assert "is a WebM / Matroska file" in refusal(read_audio_bytes, b"\x1a\x45\xdf\xa3" + bytes(200))


def test_a_format_libsndfile_knows_but_encdec_does_not_read_is_refused_by_name(tmp_path):
    aiff = written(tmp_path / "a.aiff", tone(), format="AIFF")
    assert refusal(read_audio, aiff).startswith(f"audio file {aiff} is AIFF audio; encdec reads wav, flac")


def test_nan_or_infinite_samples_are_one_sentence(tmp_path):
    samples = tone()
    samples[4000] = np.nan
    message = refusal(read_audio_bytes, encoded(samples, subtype="FLOAT", format="WAV"))
    assert message.endswith("holds a NaN or infinite sample at 0.25 s; it is not a recording")
    samples[4000] = np.inf
    assert "NaN or infinite" in refusal(read_audio_bytes, encoded(samples, subtype="FLOAT", format="WAV"))


@pytest.mark.parametrize("rate", [4_000, 384_000])
def test_a_rate_outside_the_range_is_one_sentence(rate):
    message = refusal(read_audio_bytes, encoded(tone(0.1, rate), rate, format="WAV"))
    assert message == f"the audio data is sampled at {rate:,} Hz; encdec reads 8,000 to 192,000 Hz"


def test_a_ten_hour_file_is_refused_from_its_header_before_decoding(tmp_path):
    path = tmp_path / "ten_hours.wav"
    frames = 10 * 3600 * 8_000
    with open(path, "wb") as f:  # 288 MB that the disk holds sparse: a header and a hole
        f.write(wav_header(frames, 8_000))
        f.truncate(44 + frames)
    assert refusal(read_audio, path) == f"audio file {path} lasts 10.0 h, longer than the 2.0 h allowed"
    short = written(tmp_path / "three.wav", tone(3.0))
    assert refusal(read_audio, short, max_seconds=2).endswith("lasts 3.0 s, longer than the 2.0 s allowed")
    with pytest.raises(ConfigError, match="max_seconds must be a positive number"):
        read_audio(short, max_seconds=float("nan"))


def test_a_link_named_by_the_user_is_read_and_one_to_nothing_or_no_file_is_one_sentence(tmp_path):
    """As a corpus file is (encdec.data.reading): the user named the link, so it is followed; a name inside a
    manifest is confined by safe_paths.inside, which refuses a link, before it ever reaches read_audio."""
    target = written(tmp_path / "a.wav", tone(), subtype="FLOAT")
    (tmp_path / "link.wav").symlink_to(target)
    assert torch.equal(read_audio(tmp_path / "link.wav"), read_audio(target))
    (tmp_path / "dangling.wav").symlink_to(tmp_path / "gone.wav")
    assert refusal(read_audio, tmp_path / "dangling.wav").endswith("does not exist")
    (tmp_path / "folder.wav").symlink_to(tmp_path, target_is_directory=True)
    assert refusal(read_audio, tmp_path / "folder.wav").endswith("is a directory; encdec reads only regular files")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "pipe.wav")
    assert "not a regular file" in refusal(read_audio, tmp_path / "pipe.wav")


def test_every_bad_recording_of_the_kit_is_one_sentence_naming_it(tmp_path):
    """The issue's list (empty, not audio, wrong rate, NaN samples, a link, hours long) and the rest of the kit."""
    for kind, (path, said) in bad_recordings(tmp_path / "bad").items():
        message = refusal(read_audio, path)
        assert message.startswith(f"audio file {path} ") and said in message, kind


def test_a_stream_corrupt_after_its_header_is_one_sentence_saying_where():
    data = encoded(tone(1.0, 48_000), 48_000, format="FLAC")
    garbled = data[:200] + np.random.default_rng(0).integers(0, 256, len(data) - 200, dtype=np.uint8).tobytes()
    assert refusal(read_audio_bytes, garbled).startswith("the audio data cannot be decoded after 0.00 s (")


def test_without_the_speech_extra_reading_is_one_sentence_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "soundfile", None)  # import soundfile now raises ImportError
    message = refusal(read_audio_bytes, encoded(tone(), format="WAV"))
    assert message == "reading audio needs soundfile; install it with `pip install encdec[speech]`"
