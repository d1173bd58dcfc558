"""Tokens grouped into words (transcription.words): the words, their spans and their tokens are transformers'
`_collate_word_timestamps` (the pipeline's return_timestamps="word", openai-whisper's split_to_word_tokens and
merge_punctuations) on text with punctuation on both sides, characters of several bytes and a spaceless language;
special tokens (the prompt, <|endoftext|>) make no word; a word's probability is its tokens' mean."""

import numpy as np
import pytest

from encdec.errors import ConfigError, DataError
from encdec.tokenizers import build_tokenizer
from encdec.transcription import Word
from encdec.transcription.words import segment_words, word_timestamps

tokenization_whisper = pytest.importorskip("transformers.models.whisper.tokenization_whisper")

TOKENIZER = build_tokenizer("byte")  # a byte a token: a character of several bytes spans tokens
TEXTS = [
    " Hello world, this is a test.",
    ' He said "no" (twice) -- and left... ¿Qué pasa? ¡Café!',
    " Mr. Smith's 3.5% rate: “fine”, isn't it?",
    " naïve façade déjà-vu 東京",
]


class TransformersView:
    """encdec's tokenizer as transformers' word functions read a WhisperTokenizer."""

    eos_token_id = TOKENIZER.eos_id
    language = None

    def decode(self, tokens, decode_with_timestamps=False):
        return TOKENIZER.decode(tokens)


def sequence(text: str, seed: int):
    """A window's tokens (a prompt of specials, the text, <|endoftext|>), each token's time (rising by 0 to 3
    positions of 20 ms) and probability."""
    prompt = [TOKENIZER.decoder_start_id, TOKENIZER.special_id("[MASK-3]")]
    tokens = prompt + TOKENIZER.encode(text) + [TOKENIZER.eos_id]
    rng = np.random.default_rng(seed)
    times = np.round(np.cumsum(rng.integers(0, 4, len(tokens))) * 0.02, 2)
    times[: len(prompt)] = 0.0
    return tokens, times.tolist(), rng.random(len(tokens)).tolist()


def transformers_words(tokens, times, language=None):
    """transformers' pipeline: each text token i spans (time of token i - 1, time of token i), then its words."""
    text = [i for i, token in enumerate(tokens) if token < TOKENIZER.eos_id]
    spans = [(times[i - 1] if i else 0.0, times[i]) for i in text]
    chunks = tokenization_whisper._collate_word_timestamps(
        TransformersView(), [tokens[i] for i in text], spans, language, False
    )
    return [(chunk["text"], *chunk["timestamp"]) for chunk in chunks]


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("text", TEXTS)
def test_words_and_spans_equal_transformers_word_timestamps(text, seed):
    tokens, times, probabilities = sequence(text, seed)
    words = word_timestamps(TOKENIZER, tokens, times, probabilities)
    assert [(w.word, w.start, w.end) for w in words] == transformers_words(tokens, times)
    assert "".join(w.word for w in words) == text


def test_a_spaceless_language_keeps_each_whole_character_a_word():
    tokens, times, _ = sequence("東京は晴れ。", 0)
    words = word_timestamps(TOKENIZER, tokens, times, language="ja")
    assert [(w.word, w.start, w.end) for w in words] == transformers_words(tokens, times, "japanese")
    assert [w.word for w in words] == ["東", "京", "は", "晴", "れ。"]


def test_punctuation_joins_its_word_and_the_probability_is_its_tokens_mean():
    tokens, times, probabilities = sequence(' "Yes," she said.', 1)
    words = word_timestamps(TOKENIZER, tokens, times, probabilities)
    assert [w.word for w in words] == [' "Yes,"', " she", " said."]
    first = [i for i, token in enumerate(tokens) if token < TOKENIZER.eos_id][:7]  # ' "Yes,"': seven bytes
    assert words[0] == Word(
        ' "Yes,"', times[first[0] - 1], times[first[-1]], np.mean([probabilities[i] for i in first])
    )
    assert word_timestamps(TOKENIZER, tokens, times)[0].probability is None
    later = word_timestamps(TOKENIZER, tokens, times, offset=30.0)  # a window 30 s into the recording
    assert [(w.start, w.end) for w in later] == [(round(w.start + 30, 2), round(w.end + 30, 2)) for w in words]


def test_a_window_s_words_are_its_segments_words():
    """A window of two segments, a timestamp token between them: each one's words (read from its opening
    timestamp token on, or by segment_words from the token before its first) are the window's."""
    tokens, times, _ = sequence(" One two. Three four.", 2)
    cut = tokens.index(ord("T")) - 1  # the second segment's first token, " Three"'s space
    tokens.insert(cut, TOKENIZER.special_id("[MASK-7]"))  # its opening timestamp token
    times.insert(cut, times[cut - 1])
    words = word_timestamps(TOKENIZER, tokens, times)
    first, second = (
        word_timestamps(TOKENIZER, tokens[:cut], times[:cut]),
        word_timestamps(TOKENIZER, tokens[cut:], times[cut:]),
    )
    assert first + second == words and [w.word for w in second] == [" Three", " four."]
    prompt = 2  # the window's prompt: the segments begin after it
    spans = [(prompt, cut), (cut + 1, len(tokens) - 1)]  # the second from after the timestamp token: the same
    assert segment_words(TOKENIZER, tokens, times, None, spans) == [first, second]
    with pytest.raises(DataError, match="a segment spans tokens 0 to 4, not within the window's 1 to"):
        segment_words(TOKENIZER, tokens, times, None, [(0, 4)])


def test_special_tokens_alone_make_no_words_and_unequal_lengths_are_one_sentence():
    tokens = [TOKENIZER.decoder_start_id, TOKENIZER.eos_id]
    assert word_timestamps(TOKENIZER, tokens, [0.0, 0.0]) == []
    with pytest.raises(DataError, match="tokens, token_times and probabilities must be as long as each other"):
        word_timestamps(TOKENIZER, tokens, [0.0])
    with pytest.raises(ConfigError, match="names no end-of-text token: give word_timestamps the model's eos_id"):
        word_timestamps(object(), tokens, [0.0, 0.0])


def test_eos_id_given_bounds_the_text():
    tokens, times, _ = sequence(" Hi you", 0)
    assert [w.word for w in word_timestamps(TOKENIZER, tokens, times, eos_id=ord("o"))] == [
        " Hi",
        " ",
    ]  # y, o, u: past it
