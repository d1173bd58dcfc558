"""Speech corpora: (recording, transcript) pairs from a manifest or a `datasets` Audio column.

A pair's source is a recording: the path of an audio file (str) or the file's bytes (a `datasets` Audio column
holds them embedded). Its target is the transcript. A manifest names its recordings relative to its own
folder, as the speech data script writes them (scripts/speak.py), or by absolute path:

    speech-jsonl   {"audio": "clips/0001.wav", "text": "A dog runs."}   (data.audio_field, data.text_field)
    speech-tsv     clips/0001.wav<TAB>A dog runs.                        (data.header)

The recordings are read, bounded and turned into log-mel features by the transcription objective
(data.objectives.transcribe) when a batch is made, not here: a manifest of hours of audio is read in
moments.
"""

from collections.abc import Iterator
from pathlib import Path

from encdec.data.corpora import _iter_json_objects, _require_some, field_texts, iter_tsv_pairs
from encdec.errors import DataError
from encdec.schema import short

Recording = str | bytes  # an audio file's path, or its bytes


def recording_path(manifest: str | Path, value: str) -> str:
    """A manifest's recording as a path: relative ones from the manifest's own folder."""
    path = Path(value)
    return str(path if path.is_absolute() else Path(manifest).parent / path)


def recording_value(value: object, where: str, name: str) -> Recording:
    """A recording as a manifest line or a dataset row holds it: a path, or a `datasets` Audio value read
    undecoded ({"bytes": ..., "path": ...}: its bytes where it embeds them, else its path)."""
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        value = value.get("bytes") or value.get("path")
    if isinstance(value, bytes) and value:
        return value
    if isinstance(value, str) and value.strip():
        return value.strip()
    what = "no field" if value is None else "an empty or unreadable field"
    raise DataError(f"{where} has {what} {short(name)} for its recording (a path or an Audio column)")


def recording_name(recording: Recording) -> str:
    """A recording as a refusal names it."""
    return recording if isinstance(recording, str) else f"a recording of {len(recording):,} bytes"


def iter_speech_jsonl(path: str | Path, audio_field: str = "audio", text_field: str = "text") -> Iterator[tuple]:
    """(recording path, transcript) of each JSON line."""

    def pairs() -> Iterator[tuple[str, str]]:
        for number, record in _iter_json_objects(path):
            where = f"{path} line {number}"
            audio = recording_value(record.get(audio_field), where, audio_field)
            if not isinstance(audio, str):
                raise DataError(f"{where} field {short(audio_field)} is not a path")
            yield recording_path(path, audio), field_texts(record, text_field, where)[0].strip()

    return _require_some(pairs(), path, "records")


def iter_speech_tsv(path: str | Path, header: bool = False) -> Iterator[tuple[str, str]]:
    """(recording path, transcript) of each line `path<TAB>text`; with `header` its first line skipped."""
    return ((recording_path(path, audio), text) for audio, text in iter_tsv_pairs(path, header=header))
