"""The response formats, each read back by its own parser: srt by `srt`, vtt by `webvtt-py`, the JSON ones by
json, so a subtitle player and an OpenAI client read what encdec writes."""

import io
import json

import pytest
import srt
import webvtt

from encdec.transcription import FORMATS, Segment, Transcript, Word, render
from encdec.transcription.response_formats import clock

SEGMENTS = (
    Segment(0, 0.0, 2.48, " A dog runs.", (10, 11, 12), words=(Word(" A", 0.0, 0.2), Word(" dog", 0.2, 0.9))),
    Segment(1, 2.48, 3661.0015, " It stops.\n\nThen it sleeps.", (13,)),
    Segment(2, 3661.5, 3662.0, "   "),  # nothing to show: no cue
)
TRANSCRIPT = Transcript(" A dog runs. It stops. Then it sleeps.", SEGMENTS, duration=3662.0, language="en")


def test_clock_rounds_to_the_millisecond_across_hours():
    assert clock(3661.0015, ",") == "01:01:01,002"
    assert clock(0.0004, ".") == "00:00:00.000"
    assert clock(59.9996, ".") == "00:01:00.000"


def test_srt_parses_with_one_cue_a_segment_with_text():
    cues = list(srt.parse(render(TRANSCRIPT, "srt")))
    assert [cue.index for cue in cues] == [1, 2]
    assert [cue.start.total_seconds() for cue in cues] == [0.0, 2.48]
    assert cues[1].end.total_seconds() == pytest.approx(3661.002)
    assert [cue.content for cue in cues] == ["A dog runs.", "It stops.\nThen it sleeps."]


def test_vtt_parses_with_the_same_cues():
    captions = webvtt.from_buffer(io.StringIO(render(TRANSCRIPT, "vtt"))).captions
    assert [(c.start, c.end) for c in captions] == [("00:00:00.000", "00:00:02.480"), ("00:00:02.480", "01:01:01.002")]
    assert [c.text for c in captions] == ["A dog runs.", "It stops.\nThen it sleeps."]


def test_json_formats_carry_openai_fields():
    assert json.loads(render(TRANSCRIPT, "json")) == {"text": TRANSCRIPT.text}
    verbose = json.loads(render(TRANSCRIPT, "verbose_json"))
    assert verbose["language"] == "en" and verbose["duration"] == 3662.0 and verbose["task"] == "transcribe"
    assert [s["start"] for s in verbose["segments"]] == [0.0, 2.48, 3661.5]
    assert verbose["segments"][0]["tokens"] == [10, 11, 12] and "words" not in verbose["segments"][0]
    assert verbose["words"] == [
        {"word": " A", "start": 0.0, "end": 0.2, "probability": None},
        {"word": " dog", "start": 0.2, "end": 0.9, "probability": None},
    ]
    assert render(TRANSCRIPT, "text") == "A dog runs. It stops. Then it sleeps.\n"


def test_every_format_renders():
    assert all(render(TRANSCRIPT, fmt) for fmt in FORMATS)
    with pytest.raises(ValueError, match="unknown format"):
        render(TRANSCRIPT, "docx")
