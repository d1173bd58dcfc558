"""A Transcript written in each response format of OpenAI's /v1/audio/transcriptions, which `encdec
transcribe` writes too: text, json ({"text"}), verbose_json (segments, words), srt and vtt (subtitles, one cue
a segment). SRT's times are HH:MM:SS,mmm, WebVTT's HH:MM:SS.mmm after a "WEBVTT" header; a cue's text is its
segment's, stripped, with no blank line inside it (a blank line ends a cue in both)."""

import json
from dataclasses import asdict

from encdec.transcription.transcript import Transcript

FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
MEDIA_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
SUFFIXES = {"json": ".json", "verbose_json": ".json", "text": ".txt", "srt": ".srt", "vtt": ".vtt"}


def clock(seconds: float, separator: str) -> str:
    """seconds -> HH:MM:SS{separator}mmm, rounded to the millisecond."""
    millis = max(round(seconds * 1000), 0)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    return f"{hours:02d}:{minutes:02d}:{millis // 1000:02d}{separator}{millis % 1000:03d}"


def cue_text(text: str) -> str:
    """A segment's text as one cue's: stripped, blank lines (a cue's end) closed up."""
    return "\n".join(line for line in text.strip().splitlines() if line.strip())


def verbose(transcript: Transcript) -> dict:
    """OpenAI's verbose_json: task, language, duration, text, segments (without their words), and words when
    any segment has them."""
    segments = []
    for segment in transcript.segments:
        fields = asdict(segment)
        fields.pop("words")
        fields["tokens"] = list(segment.tokens)
        segments.append(fields)
    out = {
        "task": transcript.task,
        "language": transcript.language,
        "duration": transcript.duration,
        "text": transcript.text,
        "segments": segments,
    }
    if transcript.words:
        out["words"] = [asdict(word) for word in transcript.words]
    return out | transcript.extra


def render(transcript: Transcript, fmt: str) -> str:
    """The transcript in `fmt` (one of FORMATS), as the text of a file or a response body."""
    if fmt == "text":
        return transcript.text.strip() + "\n"
    if fmt == "json":
        return json.dumps({"text": transcript.text} | transcript.extra, ensure_ascii=False)
    if fmt == "verbose_json":
        return json.dumps(verbose(transcript), ensure_ascii=False)
    if fmt not in ("srt", "vtt"):
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")  # the caller's schema bounds fmt
    separator = "," if fmt == "srt" else "."
    cues = [
        (f"{number}\n" if fmt == "srt" else "")
        + f"{clock(segment.start, separator)} --> {clock(segment.end, separator)}\n{cue_text(segment.text)}\n"
        for number, segment in enumerate((s for s in transcript.segments if cue_text(s.text)), 1)
    ]
    return ("WEBVTT\n\n" if fmt == "vtt" else "") + "\n".join(cues)
