"""Batched transcription (encdec.transcription.batched): a recording of espeak-ng sentences joined by pauses is cut
in its pauses alone, into pieces that fit the model's window and tile it; a recording without pauses is cut at
the window; the pieces of several recordings decoded as one batch give each recording the transcript it gets
alone, timestamps or not; a window decoded again (three timestamps in a row) counts its times from the cut."""

from dataclasses import replace

import pytest
import torch

from encdec.audio import SAMPLE_RATE
from encdec.errors import ConfigError
from encdec.runs.open import open_model
from encdec.transcription.batched import pieces_of, segments_of, transcribe_batched
from encdec.transcription.segmentation import cut_at_silences

from .speech_kit import SENTENCES, WINDOW_SECONDS, needs_espeak, tiny_whisper_dir, with_pauses

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    return open_model(tiny_whisper_dir(tmp_path_factory.mktemp("whisper")))


@pytest.fixture(scope="module")
def recordings():
    return [with_pauses(SENTENCES[i:] + SENTENCES[:i], voice=voice)[0] for i, voice in ((0, "en"), (1, "en-us"))]


def assert_tiles(spans, length, window):
    assert spans[0][0] == 0 and spans[-1][1] == length
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(0 < end - start <= window for start, end in spans)


@needs_espeak
def test_every_cut_lies_in_a_pause_and_every_piece_fits_the_window():
    wave, pauses = with_pauses(SENTENCES * 2)
    spans = cut_at_silences(wave, SAMPLE_RATE, WINDOW_SECONDS)
    assert len(spans) > 2
    assert_tiles(spans, len(wave), WINDOW_SECONDS * SAMPLE_RATE)
    for _, cut in spans[:-1]:
        assert any(start <= cut <= end for start, end in pauses), (cut, pauses)


def test_a_recording_without_pauses_is_cut_in_each_window_s_last_half_and_a_short_one_not_at_all():
    wave = torch.randn(11 * SAMPLE_RATE, generator=torch.Generator().manual_seed(0))
    spans = cut_at_silences(wave, SAMPLE_RATE, WINDOW_SECONDS)
    assert all(end - start >= WINDOW_SECONDS / 2 * SAMPLE_RATE for start, end in spans[:-1])  # in its last half
    assert_tiles(spans, len(wave), WINDOW_SECONDS * SAMPLE_RATE)
    assert cut_at_silences(wave[:SAMPLE_RATE], SAMPLE_RATE, WINDOW_SECONDS) == [(0, SAMPLE_RATE)]
    with pytest.raises(ConfigError, match="one wave"):
        cut_at_silences(wave[None], SAMPLE_RATE, WINDOW_SECONDS)


@needs_espeak
def test_a_stretch_of_silence_is_left_out_and_every_sound_kept():
    first, _ = with_pauses(SENTENCES[:2])
    second, _ = with_pauses(SENTENCES[2:])
    wave = torch.cat((first, torch.zeros(10 * SAMPLE_RATE), second))
    spans = cut_at_silences(wave, SAMPLE_RATE, WINDOW_SECONDS)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert all(0 < end - start <= WINDOW_SECONDS * SAMPLE_RATE for start, end in spans)
    loud = (wave.abs() > 1e-3).nonzero()[:, 0].tolist()
    assert all(any(start <= at < end for start, end in spans) for at in loud[::50])  # every sound in a piece
    assert all(wave[start:end].abs().max() > 1e-3 for start, end in spans)  # no piece of silence alone
    assert sum(end - start for start, end in spans) < len(wave) - 5 * SAMPLE_RATE
    assert_tiles(cut_at_silences(wave, SAMPLE_RATE, WINDOW_SECONDS, silence_db=None), len(wave), WINDOW_SECONDS * 16000)


@needs_espeak
@pytest.mark.parametrize("timestamps", [False, True], ids=["text", "timestamps"])
def test_the_pieces_of_several_recordings_decoded_as_one_batch_equal_each_recording_alone(
    opened, recordings, timestamps
):
    options = dict(defaults=opened.generation, return_timestamps=timestamps)
    together = transcribe_batched(opened.model, opened.text, recordings, **options)
    alone = [transcribe_batched(opened.model, opened.text, [wave], **options)[0] for wave in recordings]
    assert together == alone
    for transcript, wave in zip(together, recordings):
        assert transcript.duration == pytest.approx(len(wave) / SAMPLE_RATE, abs=1e-3)
        assert len(transcript.segments) >= 2  # a piece each at least: the recordings pass the window
        assert all(0 <= s.start <= s.end <= transcript.duration for s in transcript.segments)
        assert [s.id for s in transcript.segments] == list(range(len(transcript.segments)))
        assert transcript.text == " ".join(s.text.strip() for s in transcript.segments if s.text.strip())


def test_segments_come_from_timestamps_and_a_window_decoded_again_counts_from_its_cut():
    t = lambda seconds: 100 + round(seconds / 0.02)  # noqa: E731 (timestamps from id 100)
    tokens = [t(0), 1, 2, t(1), t(1.2), 3, t(2), t(2.4), t(0), 4, 5, t(0.5)]
    assert segments_of(tokens, 100, 10.0, 14.0) == [
        (10.0, 11.0, [1, 2]),
        (11.2, 12.0, [3]),
        (12.0, 12.5, [4, 5]),  # the window decoded again from <|2.00|>
    ]
    assert segments_of([7, 8], 100, 3.0, 5.5) == [(3.0, 5.5, [7, 8])]  # no timestamps: the piece whole
    assert segments_of([t(0.4), 7, 8], 100, 3.0, 5.5) == [(3.4, 5.5, [7, 8])]  # no closing timestamp


@pytest.mark.parametrize("timestamps", [False, True], ids=["text", "timestamps"])
def test_chunk_length_cuts_a_recording_into_pieces_each_segment_timed_within_its_own(opened, timestamps):
    from math import pi

    from encdec.transcription.segmentation import cut_at_pauses

    t = torch.arange(SAMPLE_RATE) / SAMPLE_RATE  # tones of 1 s, 0.6 s apart: the window (4 s) holds two or three
    parts = [torch.zeros(SAMPLE_RATE // 2)]
    for pitch in (220, 330, 440, 550, 660, 770):
        parts += [0.5 * torch.sin(2 * pi * pitch * t), torch.zeros(round(0.6 * SAMPLE_RATE))]
    wave = torch.cat(parts)
    options = dict(defaults=opened.generation, return_timestamps=timestamps)
    [transcript] = transcribe_batched(opened.model, opened.text, [wave], chunk_length=1.5, **options)
    pieces = cut_at_pauses(wave, SAMPLE_RATE, 1.5)
    assert len(pieces) == 6 and len(cut_at_pauses(wave, SAMPLE_RATE, WINDOW_SECONDS)) < 6  # a tone a piece
    starts = {start // 160: (start / SAMPLE_RATE, end / SAMPLE_RATE) for start, end in pieces}  # seek: mel frames
    assert transcript.segments and transcript.duration == pytest.approx(len(wave) / SAMPLE_RATE, abs=1e-3)
    for segment in transcript.segments:
        start, end = starts[segment.seek]  # the piece it came from
        assert start - 1e-3 <= segment.start <= segment.end <= end + 1e-3, (segment, start, end)
    if not timestamps:  # a segment a piece, spanning it
        spans = [(round(a, 3), round(b, 3)) for a, b in starts.values()]
        assert [(s.start, s.end) for s in transcript.segments] == spans
    [default] = transcribe_batched(opened.model, opened.text, [wave], **options)
    assert len({s.seek for s in default.segments}) < len({s.seek for s in transcript.segments})
    window = "from 0.1 s to the model's window of 4 s"
    for bad, says in ((0.0, window), (4.5, window), (float("nan"), "a finite number")):
        with pytest.raises(ConfigError, match=f"chunk_length must be {says}"):
            transcribe_batched(opened.model, opened.text, [wave], chunk_length=bad, **options)


@needs_espeak
def test_words_lie_in_their_pieces_spell_their_segments_and_a_batch_times_each_piece_as_it_is_alone(opened, recordings):
    options = dict(defaults=opened.generation, return_timestamps=True)
    together = transcribe_batched(opened.model, opened.text, recordings, word_timestamps=True, **options)
    alone = [transcribe_batched(opened.model, opened.text, [w], word_timestamps=True, **options)[0] for w in recordings]
    spans = lambda ts: [[(w.word, w.start, w.end) for w in t.words] for t in ts]  # noqa: E731
    assert spans(together) == spans(alone)  # times exactly; probabilities up to a batch's rounding
    chances = [[w.probability for w in t.words] for t in together]
    assert chances == [pytest.approx([w.probability for w in t.words], rel=1e-4) for t in alone]
    plain = transcribe_batched(opened.model, opened.text, recordings, **options)  # the words beside, nothing else
    assert [[replace(s, words=()) for s in t.segments] for t in together] == [list(t.segments) for t in plain]
    pieces = pieces_of(recordings, opened.text)
    ends = {(owner, start // 160): end / SAMPLE_RATE for owner, (start, end) in zip(pieces.recording, pieces.spans)}
    for owner, transcript in enumerate(together):
        assert transcript.words
        for segment in transcript.segments:
            assert "".join(word.word for word in segment.words) == segment.text
            start, end = segment.seek * 160 / SAMPLE_RATE, ends[owner, segment.seek]  # its piece's span
            assert all(start - 0.01 <= w.start <= w.end <= end + 0.02 for w in segment.words), (segment, end)
            assert all(a.end <= b.start + 1e-9 for a, b in zip(segment.words, segment.words[1:]))  # in order


@needs_espeak
def test_word_timing_passes_bounded_to_one_piece_each_time_the_words_as_one_pass_does(opened, recordings, monkeypatch):
    from encdec.transcription import batched

    options = dict(defaults=opened.generation, return_timestamps=True, word_timestamps=True)
    whole = transcribe_batched(opened.model, opened.text, recordings[:1], **options)
    pieces = batched.pieces_of(recordings[:1], opened.text)
    assert batched.map_bytes(opened.model, 10, pieces.frames) == 2 * 10 * 200 * 4  # 1 layer of 2 heads, 200 positions
    monkeypatch.setattr(batched, "MAP_BYTES", 1)  # a piece a pass
    one_by_one = transcribe_batched(opened.model, opened.text, recordings[:1], **options)
    assert len(pieces.spans) > 1 and whole[0].words
    assert [(w.word, w.start, w.end) for w in one_by_one[0].words] == [(w.word, w.start, w.end) for w in whole[0].words]
