"""Tokens grouped into words, each with its time span and mean probability: openai-whisper's
`split_to_word_tokens` and `merge_punctuations`, as transformers' `_combine_tokens_into_words` and
`_collate_word_timestamps` do them (the pipeline's return_timestamps="word").

A window's tokens are split where their text decodes whole (a character of several byte tokens stays in one
piece), the pieces joined into words at spaces (a piece that starts with a space, is punctuation, or is the first,
starts a word), then an opening mark (a quote, a bracket, ¿) is joined to the word after it and a closing one (a
full stop, a comma, a closing quote) to the word before it. Spaceless languages (Chinese, Japanese, Thai, Lao,
Burmese, Cantonese) keep every whole piece a word.

The text is read through `decode(ids) -> str`, which encdec's tokenizers, a run's or an opened model's text
encoding and a Hugging Face tokenizer all have (text tokens alone are decoded: no special token to skip).
"""

import string
from collections.abc import Sequence

from encdec.errors import ConfigError, DataError
from encdec.transcription.transcript import Word

PREPENDED = "\"'“¡¿([{-"  # joined to the word after them
APPENDED = "\"'.。,，!！?？:：”)]}、"  # joined to the word before them
SPACELESS = {"zh", "ja", "th", "lo", "my", "yue"}
REPLACEMENT = "\ufffd"  # what a character cut between two tokens decodes to


def word_timestamps(
    tokenizer,
    tokens: Sequence[int],
    token_times: Sequence[float],
    probabilities: Sequence[float] | None = None,
    language: str | None = None,
    offset: float = 0.0,
    eos_id: int | None = None,
    begins: float = 0.0,
) -> list[Word]:
    """The words of `tokens` (a window's whole sequence, or a part of it) with their spans in seconds, `offset`
    (the window's start in the recording) added: `token_times[i]` is where token i ends
    (word_times.token_timestamps), so a word starts at the time of the token before its first (`begins` for
    tokens[0]: the time of the token before it in its window; segment_words reads a window's segments so) and
    ends at that of its last. Only text tokens make words: those below <|endoftext|> (`eos_id`; None: the
    tokenizer's), as Whisper's vocabulary orders them. `probabilities[i]` is token i's, a word's their mean;
    `language` (a code: "ja") splits a spaceless language's text into characters. `tokenizer`: anything with
    decode(ids) -> str."""
    if len(token_times) != len(tokens) or (probabilities is not None and len(probabilities) != len(tokens)):
        raise DataError("tokens, token_times and probabilities must be as long as each other")
    end_of_text = text_end(tokenizer) if eos_id is None else eos_id
    text = [index for index, token in enumerate(tokens) if token < end_of_text]
    words = []
    for piece, indices in grouped(tokenizer, [tokens[i] for i in text], language):
        first, last = text[indices[0]], text[indices[-1]]
        start = token_times[first - 1] if first > 0 else begins
        mean = None if probabilities is None else sum(probabilities[text[i]] for i in indices) / len(indices)
        end = token_times[last]
        words.append(Word(piece, round(offset + float(start), 2), round(offset + float(end), 2), mean))
    return words


def segment_words(
    tokenizer,
    tokens: Sequence[int],
    token_times: Sequence[float],
    probabilities: Sequence[float] | None,
    spans: Sequence[tuple[int, int]],
    **options,
) -> list[list[Word]]:
    """Each segment's words: `spans` (start, end) the segments' token ranges in a window's `tokens` (its prompt
    first: each start at least 1), the first token of each beginning at the time of the token before it;
    `options` word_timestamps'."""
    words = []
    for start, end in spans:
        if not 1 <= start <= end <= len(tokens):
            raise DataError(f"a segment spans tokens {start} to {end}, not within the window's 1 to {len(tokens)}")
        chosen = None if probabilities is None else probabilities[start:end]
        span = tokens[start:end], token_times[start:end], chosen
        words.append(word_timestamps(tokenizer, *span, **options, begins=token_times[start - 1]))
    return words


def text_end(tokenizer) -> int:
    """<|endoftext|>'s id: an encdec tokenizer's eos_id, a Hugging Face tokenizer's eos_token_id."""
    for name in ("eos_id", "eos_token_id"):
        if isinstance(getattr(tokenizer, name, None), int):
            return getattr(tokenizer, name)
    raise ConfigError("this tokenizer names no end-of-text token: give word_timestamps the model's eos_id")


def grouped(tokenizer, tokens: list[int], language: str | None = None) -> list[tuple[str, list[int]]]:
    """(word, the indices of its tokens) for each word of the text tokens `tokens`, in order."""
    pieces = whole_pieces(tokenizer, tokens)
    words = pieces if language in SPACELESS else joined_at_spaces(pieces)
    return merged_punctuation(words)


def whole_pieces(tokenizer, tokens: list[int]) -> list[tuple[str, list[int]]]:
    """The tokens cut where the text decoded so far holds no character cut in two (no replacement character
    that the whole text does not hold at that place)."""
    full = tokenizer.decode(tokens)
    pieces, current, offset = [], [], 0
    for index in range(len(tokens)):
        current.append(index)
        decoded = tokenizer.decode([tokens[i] for i in current])
        cut = decoded.find(REPLACEMENT)
        if cut < 0 or offset + cut >= len(full) or full[offset + cut] == REPLACEMENT:
            pieces.append((decoded, current))
            current, offset = [], offset + len(decoded)
    return pieces


def joined_at_spaces(pieces: list[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """Pieces joined into words: one that starts with a space, is punctuation or comes first starts a word."""
    words: list[tuple[str, list[int]]] = []
    for piece, indices in pieces:
        if not words or piece.startswith(" ") or piece.strip() in string.punctuation:
            words.append((piece, list(indices)))
        else:
            words[-1] = (words[-1][0] + piece, words[-1][1] + indices)
    return words


def merged_punctuation(words: list[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """Opening marks (PREPENDED, after a space) joined to the word after them, then closing marks (APPENDED) to
    the word before them unless it ends with a space; the words emptied are dropped."""
    words = [(word, list(indices)) for word, indices in words]
    following = len(words) - 1
    for i in range(len(words) - 2, -1, -1):
        word, indices = words[i]
        if word.startswith(" ") and word.strip() in PREPENDED:
            words[following] = (word + words[following][0], indices + words[following][1])
            words[i] = ("", [])
        else:
            following = i
    previous = 0
    for j in range(1, len(words)):
        word, indices = words[j]
        if not words[previous][0].endswith(" ") and word in APPENDED:
            words[previous] = (words[previous][0] + word, words[previous][1] + indices)
            words[j] = ("", [])
        else:
            previous = j
    return [(word, indices) for word, indices in words if word]
