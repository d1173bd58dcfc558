"""Word timestamps through long-form transcription (`Transcriber(word_timestamps=True)`, `encdec transcribe
--word-timestamps`): on a recording of one window, the words and their times equal those transformers' ASR
decoding (`_decode_asr`, return_timestamps="word") makes of its own `generate(return_token_timestamps=True,
return_timestamps=True)` on the same tiny random Whisper; every word lies in the window.

The window is decoded twice (its first decoding ends mid-segment after a timestamp pair, so `generate` decodes again
from that pair on, as encdec's short form does), and each token's time is that of its own decoding, offset by where
that decoding starts: transformers' segments' token_timestamps. Its flattened `token_timestamps` output
(_pad_to_max_length) concatenates each decoding's times without that offset, so a later decoding's words restart at
0 s: a bug openai-whisper (whose word times add each window's start) does not have, and which encdec does not copy.
The first decoding is warped over the recording's frames (the attention mask's), not the whole window's."""

import pytest
import torch

import encdec
from encdec.audio import frame_lengths, log_mel
from encdec.errors import ConfigError
from encdec.runs.open import open_model
from encdec.transcription import Transcriber
from tests.audio.test_features import speak
from tests.transcription.test_word_times import FRAMES, whisper_with_tokenizer  # noqa: F401 (a fixture)

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")


def test_words_of_a_window_equal_transformers_word_timestamps(whisper_with_tokenizer):  # noqa: F811
    reference, tokenizer, path = whisper_with_tokenizer
    wave = speak("Hello world, this is a short test.")
    features, frames = log_mel([wave], 80, frames=FRAMES), frame_lengths([wave], FRAMES)
    mask = (torch.arange(FRAMES) < frames[:, None]).long()
    out = reference.generate(
        features, attention_mask=mask, return_token_timestamps=True, return_timestamps=True, language="en",
        max_new_tokens=30, return_segments=True,
    )  # fmt: skip
    segments = out["segments"][0]
    assert segments[-1]["result"] is not segments[0]["result"] and segments[-1]["start"] > 2  # two decodings
    tokens = torch.cat([segment["tokens"] for segment in segments])
    times = torch.cat([segment["token_timestamps"] for segment in segments])  # each offset by its decoding's seek
    assert torch.equal(tokens, out["sequences"][0])
    _, chunks = tokenizer._decode_asr(
        [{"tokens": tokens[None], "token_timestamps": times[None]}],
        return_timestamps="word",
        return_language=False,
        time_precision=0.02,
    )
    opened = open_model(path)
    [transcript] = Transcriber(opened.model, opened.text, word_timestamps=True, language="en", max_new_tokens=30)(
        [wave]
    )
    expected = [(chunk["text"], *chunk["timestamp"]) for chunk in chunks["chunks"]]
    assert [(w.word, w.start, w.end) for w in transcript.words] == expected
    assert expected and all(0 <= w.start <= w.end <= FRAMES / 100 for w in transcript.words)


def test_word_timestamps_without_a_text_encoding_are_one_sentence(whisper_with_tokenizer):  # noqa: F811
    with pytest.raises(ConfigError, match="^word timestamps need the model's text encoding"):
        Transcriber(encdec.load_hf(whisper_with_tokenizer[2]), None, word_timestamps=True, language="en")
