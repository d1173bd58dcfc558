"""Long form within pieces cut at pauses (Transcriber's chunk_length): each piece read from its own samples, so
without timestamps or previous text a recording's segments are its pieces' each read alone; with timestamps
every segment lies within its piece and none in the silence between; windows never pass their piece's end; a
chunk_length outside 0.1 s to the model's window is one sentence."""

from math import pi

import pytest
import torch

from encdec.audio import SAMPLE_RATE
from encdec.errors import ConfigError
from encdec.runs.open import open_model
from encdec.transcription.longform import Transcriber, windows_from
from encdec.transcription.segmentation import cut_at_pauses

from .speech_kit import tiny_whisper_dir

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")
OPTIONS = dict(max_new_tokens=10)


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    return open_model(tiny_whisper_dir(tmp_path_factory.mktemp("whisper")))


@pytest.fixture(scope="module")
def tones():
    """Six tones of 1 s, 0.6 s of silence between them: a window (4 s) holds two or three, a piece of 1.5 s one."""
    t = torch.arange(SAMPLE_RATE) / SAMPLE_RATE
    parts = [torch.zeros(SAMPLE_RATE // 2)]
    for pitch in (220, 330, 440, 550, 660, 770):
        parts += [0.5 * torch.sin(2 * pi * pitch * t), torch.zeros(round(0.6 * SAMPLE_RATE))]
    return torch.cat(parts)


def test_windows_run_back_to_back_within_each_piece_and_never_past_its_end():
    pieces = [(0, 5 * SAMPLE_RATE), (6 * SAMPLE_RATE, 7 * SAMPLE_RATE + 80)]  # 7.005 s: its last frame part-filled
    assert windows_from(pieces, 0, 200, 9) == [
        (0, 200, (0, 32_000)),
        (200, 200, (32_000, 64_000)),
        (400, 100, (64_000, 80_000)),
        (600, 101, (96_000, 112_080)),
    ]
    assert windows_from(pieces, 250, 200, 2) == [(250, 200, (40_000, 72_000)), (450, 50, (72_000, 80_000))]
    assert windows_from(pieces, 520, 200, 9) == [(600, 101, (96_000, 112_080))]  # the silence between: skipped
    assert windows_from(pieces, 701, 200, 9) == [] and windows_from([], 0, 200, 9) == []
    tail = [(0, 5 * SAMPLE_RATE + 100)]  # a piece's rest of one frame: nothing a timestamp (20 ms) could time
    assert windows_from(tail, 500, 200, 9) == [(500, 1, (80_000, 80_100))] and windows_from(tail, 500, 200, 9, 2) == []


@pytest.mark.parametrize("window_batch", [1, 8])
def test_without_timestamps_or_previous_text_each_piece_reads_as_that_piece_alone(opened, tones, window_batch):
    options = dict(OPTIONS, return_timestamps=False)
    [ours] = Transcriber(opened.model, opened.text, chunk_length=1.5, window_batch=window_batch, **options)([tones])
    pieces = cut_at_pauses(tones, SAMPLE_RATE, 1.5)
    alone = Transcriber(opened.model, opened.text, **options)([tones[start:end] for start, end in pieces])
    assert len(pieces) == 6 and len(ours.segments) == 6  # a piece a tone, a segment a piece
    assert [s.tokens for s in ours.segments] == [t.segments[0].tokens for t in alone]
    assert [s.text for s in ours.segments] == [t.segments[0].text for t in alone]
    for segment, (start, end) in zip(ours.segments, pieces):  # the piece's span, from frames of 10 ms
        assert segment.start == pytest.approx(start / SAMPLE_RATE, abs=0.011)
        assert segment.end == pytest.approx(end / SAMPLE_RATE, abs=0.011)


def test_with_timestamps_every_segment_lies_within_its_piece_and_the_previous_text_goes_on(opened, tones):
    pieces = cut_at_pauses(tones, SAMPLE_RATE, 1.5)
    spans = [(start / SAMPLE_RATE, end / SAMPLE_RATE) for start, end in pieces]
    for condition in (False, True):
        transcriber = Transcriber(opened.model, opened.text, condition, chunk_length=1.5, **OPTIONS)
        [transcript] = transcriber([tones])
        assert transcript.segments and transcript.duration == pytest.approx(len(tones) / SAMPLE_RATE, abs=1e-3)
        for segment in transcript.segments:
            assert any(a - 0.011 <= segment.start <= segment.end <= b + 0.011 for a, b in spans), (segment, spans)
        assert {s.seek for s in transcript.segments} >= {start // 160 for start, _ in pieces[:1]}
    whole = Transcriber(opened.model, opened.text, **OPTIONS)([tones])[0]
    assert [s.tokens for s in whole.segments] != [s.tokens for s in transcript.segments]  # the pieces read apart


@pytest.mark.parametrize(
    "options, says",
    [
        (dict(chunk_length=0.0), "chunk_length must be from 0.1 s to the model's window of 4 s"),
        (dict(chunk_length=4.5), "chunk_length must be from 0.1 s to the model's window of 4 s"),
        (dict(chunk_length=float("nan")), "chunk_length must be a finite number"),
        (dict(chunk_length=2.0, speech_pad=-1.0), "speech_pad must be zero or more"),
    ],
)
def test_a_chunk_length_or_speech_pad_out_of_range_is_one_sentence(opened, options, says):
    with pytest.raises(ConfigError, match=says):
        Transcriber(opened.model, opened.text, **options, **OPTIONS)
