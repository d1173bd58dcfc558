"""Where batched transcription cuts (encdec.transcription.segmentation.cut_at_pauses), on waves written here: tones
separated by silences of known lengths. Speech splits at silences of min_silence or more and joins across
shorter ones; stretches are padded and merged while the piece stays within chunk_length; a stretch of speech
longer than chunk_length is cut in its quietest part; silence is left out; pieces come in order, apart."""

import math

import pytest
import torch

from encdec.errors import ConfigError
from encdec.transcription.segmentation import cut_at_pauses, levels_of, speech_of

RATE = 16_000
FRAME = 480  # samples of a 30 ms frame: the detector's resolution


def tone(seconds: float, loud: float = 0.5, seed: int = 0) -> torch.Tensor:
    """A 440 Hz tone with a little noise (a tenth of its amplitude), `seconds` long."""
    t = torch.arange(round(seconds * RATE)) / RATE
    noise = torch.randn(len(t), generator=torch.Generator().manual_seed(seed)) * loud / 10
    return loud * torch.sin(2 * math.pi * 440 * t) + noise


def silence(seconds: float) -> torch.Tensor:
    return torch.zeros(round(seconds * RATE))


def joined(parts: list[torch.Tensor]) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """The parts one after another, and the (start, end) samples of each tone (every other part, from the second)."""
    tones, at = [], 0
    for i, part in enumerate(parts):
        if i % 2:
            tones.append((at, at + len(part)))
        at += len(part)
    return torch.cat(parts), tones


def near(found, expected, slack: int = FRAME):
    """Spans equal within `slack` samples at each end."""
    return len(found) == len(expected) and all(
        abs(a - c) <= slack and abs(b - d) <= slack for (a, b), (c, d) in zip(found, expected)
    )


def assert_pieces(pieces, wave, tones, chunk_length):
    """In order and apart, none longer than chunk_length, every tone's samples in one of them."""
    assert all(0 <= start < end <= len(wave) for start, end in pieces)
    assert all(a[1] <= b[0] for a, b in zip(pieces, pieces[1:]))  # in order, not overlapping
    assert all(end - start <= chunk_length * RATE for start, end in pieces)
    for start, end in tones:
        covered = sum(max(0, min(end, b) - max(start, a)) for a, b in pieces)
        assert covered == end - start, (start, end, pieces)


def test_speech_splits_at_silences_of_min_silence_or_more_and_joins_across_shorter_ones():
    wave, tones = joined([silence(1), tone(1), silence(0.8), tone(0.5), silence(0.1), tone(0.5), silence(0.45)])
    wave = torch.cat((wave, tone(0.7), silence(1)))
    tones.append((tones[-1][1] + round(0.45 * RATE), tones[-1][1] + round(1.15 * RATE)))
    levels = levels_of(wave, RATE)
    a, b, c, d = tones
    assert near(speech_of(levels, min_silence=0.3), [a, (b[0], c[1]), d])  # 0.8 and 0.45 s split, 0.1 s joins
    assert near(speech_of(levels, min_silence=0.6), [a, (b[0], d[1])])  # 0.45 s joins now
    assert near(speech_of(levels, min_silence=0.05), tones)  # every silence splits
    assert near(speech_of(levels, min_silence=2), [(a[0], d[1])])


def test_stretches_are_padded_and_merged_while_the_piece_stays_within_chunk_length():
    parts = [silence(1)]
    for i in range(6):
        parts += [tone(1, seed=i), silence(0.5)]
    wave, tones = joined(parts)
    pad = round(0.2 * RATE)
    pieces = cut_at_pauses(wave, RATE, 3.0, speech_pad=0.2)
    # padded, a tone spans 1.4 s; two and the silence between 2.9 s: merged; a third would pass 3 s
    expected = [(tones[i][0] - pad, tones[i + 1][1] + pad) for i in (0, 2, 4)]
    assert near(pieces, expected)
    assert_pieces(pieces, wave, tones, 3.0)
    assert near(cut_at_pauses(wave, RATE, 1.2, speech_pad=0.2), [(a - 1600, b + 1600) for a, b in tones])  # room
    assert near(cut_at_pauses(wave, RATE, 1.5, speech_pad=0.0), tones)  # no padding: the tones alone
    assert near(cut_at_pauses(wave, RATE, 10.0, speech_pad=0.4), [(tones[0][0] - 6400, tones[-1][1] + 6400)])
    for chunk_length in (0.5, 1.0, 1.7, 2.5, 4.0, 8.0):
        for speech_pad in (0.0, 0.1, 0.4, 1.0):
            assert_pieces(cut_at_pauses(wave, RATE, chunk_length, speech_pad=speech_pad), wave, tones, chunk_length)


def test_a_piece_ends_at_the_longest_pause_of_its_last_half_not_the_last_that_fits():
    # four "words" of 1 s: a comma's pause (0.2 s), a sentence's (0.7 s), a comma's, then more speech after 0.2 s
    wave, tones = joined(
        [silence(1), tone(1), silence(0.2), tone(1, seed=1), silence(0.7), tone(1, seed=2)]
        + [
            silence(0.2),
            tone(1, seed=3),
            silence(0.2),
            tone(1, seed=4),
            silence(1),
        ]
    )
    a, b, c, d, e = tones
    # a piece of 4 s from the first could hold three (3.9 s): it ends at the sentence's pause after the second,
    # which ends past 2 s, and not at the comma's after the third (the greedy merge's choice)
    assert near(cut_at_pauses(wave, RATE, 4.0), [(a[0], b[1]), (c[0], e[1])])
    assert near(cut_at_pauses(wave, RATE, 3.0), [(a[0], b[1]), (c[0], d[1]), e])  # the third's three: 3.4 s
    # equal pauses: the latest that ends past half of the piece
    even, ones = joined([silence(1), tone(1), silence(0.5), tone(1, seed=1), silence(0.5), tone(1, seed=2), silence(1)])
    assert near(cut_at_pauses(even, RATE, 2.6), [(ones[0][0], ones[1][1]), ones[2]])
    assert near(cut_at_pauses(even, RATE, 1.2), ones)  # nothing joins
    # none ends past half: the last that fits ends the piece
    short, (f, g, h) = joined([silence(1), tone(0.5), silence(0.3), tone(1), silence(0.3), tone(3), silence(1)])
    assert near(cut_at_pauses(short, RATE, 4.0), [(f[0], g[1]), h])
    for chunk_length in (1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 8.0):
        assert_pieces(cut_at_pauses(wave, RATE, chunk_length), wave, tones, chunk_length)


def test_a_stretch_of_speech_longer_than_chunk_length_is_cut_in_its_quietest_part():
    dip = tone(0.4, loud=0.05)  # 20 dB quieter, yet speech (within 50 dB of the loudest): no pause
    wave, tones = joined([silence(1), torch.cat((tone(2.4), dip, tone(3.2, seed=1))), silence(1)])
    pieces = cut_at_pauses(wave, RATE, 3.0, speech_pad=0.0)
    assert len(pieces) == 3  # 6 s of speech without a pause: cut where it is quietest, within each 3 s
    assert_pieces(pieces, wave, tones, 3.0)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))  # one stretch: its pieces tile it
    start = tones[0][0]
    assert start + 2.4 * RATE <= pieces[0][1] <= start + 2.8 * RATE  # the first cut in the dip
    for chunk_length in (0.1, 0.25, 0.5, 1.0):  # down to the shortest asked for
        assert_pieces(cut_at_pauses(wave, RATE, chunk_length), wave, tones, chunk_length)


def test_silence_is_left_out_and_a_recording_of_one_sound_is_one_piece():
    wave, tones = joined([silence(2), tone(1.5), silence(9), tone(1, seed=1), silence(2)])
    pieces = cut_at_pauses(wave, RATE, 10.0, speech_pad=0.4)
    pad = round(0.4 * RATE)
    assert near(pieces, [(tones[0][0] - pad, tones[0][1] + pad), (tones[1][0] - pad, tones[1][1] + pad)])
    assert sum(end - start for start, end in pieces) < len(wave) - 11 * RATE
    assert cut_at_pauses(tone(2), RATE, 10.0) == [(0, 2 * RATE)]
    assert cut_at_pauses(silence(0.01), RATE, 10.0) == [(0, 160)]  # shorter than a frame: kept whole
    assert cut_at_pauses(silence(0), RATE, 10.0) == []


@pytest.mark.parametrize(
    "options, says",
    [
        (dict(chunk_length=0), "chunk_length must be at least 0.1"),
        (dict(chunk_length=0.05), "chunk_length must be at least 0.1"),
        (dict(chunk_length=-1.0), "chunk_length must be at least 0.1"),
        (dict(chunk_length=float("nan")), "chunk_length must be a finite number"),
        (dict(chunk_length=1e9), "chunk_length must be at most"),
        (dict(chunk_length=2, min_silence=-0.1), "min_silence must be zero or more"),
        (dict(chunk_length=2, speech_pad=float("inf")), "speech_pad must be a finite number"),
        (dict(chunk_length=2, speech_db=-3), "speech_db must be zero or more"),
    ],
)
def test_bad_values_are_one_sentence(options, says):
    with pytest.raises(ConfigError, match=says):
        cut_at_pauses(tone(1), RATE, **options)


def test_a_wave_of_more_than_one_dimension_and_a_chunk_of_less_than_two_frames_are_refused():
    with pytest.raises(ConfigError, match="one wave \\(N,\\) of samples"):
        cut_at_pauses(tone(1)[None], RATE, 2.0)
    with pytest.raises(ConfigError, match="a chunk_length of 0.15 s holds fewer than two frames of 0.1 s"):
        cut_at_pauses(tone(1), RATE, 0.15, frame_seconds=0.1)
