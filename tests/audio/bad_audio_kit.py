"""Bad recordings, one of each kind the speech issue names, for any test that feeds audio to encdec (read_audio
here; a command or the server through its own door): each file beside the words its one-sentence refusal holds.

    for kind, (path, said) in bad_recordings(tmp_path).items(): ...   # refused, `said` in the sentence

8-bit PCM is not among them: it is read, level for level equal to 16 bits (test_reading.py). A link the user
names to a real recording is read too, as a corpus file is; a link to nothing or to a directory is refused.
"""

import os
import struct
from pathlib import Path

import numpy as np


def wav_header(frames: int, rate: int, bits: int = 8) -> bytes:
    """A mono PCM WAV header declaring `frames` samples, for a sparse file longer than a test could write."""
    size = frames * bits // 8
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * bits // 8, bits // 8, bits)
    riff = struct.pack("<I", 36 + size)
    return b"RIFF" + riff + b"WAVEfmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", size)


def bad_recordings(folder: Path) -> dict[str, tuple[Path, str]]:
    """kind -> (a file made in `folder`, the words its refusal holds)."""
    import soundfile

    folder.mkdir(parents=True, exist_ok=True)
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(8000) / 16_000)).astype(np.float32)
    made = {}
    (folder / "empty.wav").write_bytes(b"")
    made["empty"] = (folder / "empty.wav", "is empty (0 bytes)")
    soundfile.write(folder / "no_samples.wav", np.zeros(0, np.float32), 16_000)
    made["no samples"] = (folder / "no_samples.wav", "holds no audio (0 samples)")
    (folder / "notes.wav").write_text("not a recording\n" * 20)
    made["not audio"] = (folder / "notes.wav", "is not a recording soundfile decodes")
    (folder / "song.m4a").write_bytes(b"\x00\x00\x00\x20ftypM4A " + bytes(200))
    made["another container"] = (folder / "song.m4a", "is an MP4 / M4A file")
    soundfile.write(folder / "slow.wav", tone[:400], 4_000)
    made["wrong rate"] = (folder / "slow.wav", "is sampled at 4,000 Hz; encdec reads 8,000 to 192,000 Hz")
    nan = tone.copy()
    nan[100] = np.nan
    soundfile.write(folder / "nan.wav", nan, 16_000, subtype="FLOAT")
    made["NaN samples"] = (folder / "nan.wav", "holds a NaN or infinite sample")
    with open(folder / "ten_hours.wav", "wb") as f:  # 288 MB the disk holds sparse: a header and a hole
        frames = 10 * 3600 * 8_000
        f.write(wav_header(frames, 8_000))
        f.truncate(44 + frames)
    made["hours long"] = (folder / "ten_hours.wav", "lasts 10.0 h, longer than the 2.0 h allowed")
    os.symlink(folder / "gone.wav", folder / "dangling.wav")
    made["a link to nothing"] = (folder / "dangling.wav", "does not exist")
    os.symlink(folder, folder / "folder.wav")
    made["a link to a directory"] = (folder / "folder.wav", "is a directory")
    os.mkfifo(folder / "pipe.wav")
    made["a FIFO"] = (folder / "pipe.wav", "not a regular file")
    return made
