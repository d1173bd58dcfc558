"""Passkey retrieval (Mohtashami and Jaggi 2023, "Landmark Attention", section 4.2): a long text with one fact
planted at a chosen depth, and that fact as the target, so that the answer depends on one position anywhere in
the input. The haystack is real text (a corpus's documents, in order, cut at sentence ends), not a filler
sentence repeated, so that the needle is the one odd sentence among many ordinary ones.

A key is `digits` different digits (five by default, 30,240 keys; a digit twice would leave the next one
ambiguous to a copy through cross-attention, which has no positions), or, with `keys`, one of a list of words
(`word_keys`: each one token of the tokenizer). The docs/recipes.md recipe uses two digits (90 keys): a tiny
T5 trained from scratch here found a five-digit key's digits within 300 steps but wrote them out of order (its
decoder, with relative positions alone, cannot count which digit comes next), and copying one of 1,000 words
stayed at chance for 450 steps; with two, the decoder's first step reads the digit after "is", its second the
one after that, and the score measures whether the needle is found.
"""

import random
import re
from collections.abc import Callable, Iterable, Iterator

from encdec.errors import DataError

NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key?"
KEY_DIGITS = 5
KEY_WORDS = 1000  # word keys drawn (chance: one in 1,000)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(documents: Iterable[str]) -> Iterator[str]:
    """The documents' sentences in order, over and over (a haystack may be longer than the corpus)."""
    documents = iter(documents)
    seen = []
    for document in documents:
        seen.append(document)
        yield from (s for s in SENTENCE_END.split(document.strip()) if s)
    if not seen:
        raise DataError("the passkey haystack's corpus holds no documents")
    while True:
        for document in seen:
            yield from (s for s in SENTENCE_END.split(document.strip()) if s)


def word_keys(pieces: Iterable[str], limit: int = KEY_WORDS, seed: int = 0) -> list[str]:
    """Up to `limit` words (lower-case letters, 5-12 of them) among `pieces` (each one-token text of a
    tokenizer), drawn with `seed`: the same keys for every file made with one tokenizer (train, validation,
    test). A haystack may hold its key elsewhere too; only the needle says it is the key."""
    words = sorted({p.strip() for p in pieces if re.fullmatch(r"[a-z]{5,12}", p.strip())})
    if not words:
        raise DataError("the tokenizer has no one-token word of 5-12 letters to be a passkey")
    return sorted(random.Random(seed).sample(words, min(limit, len(words))))


def passkey_example(
    haystack: Iterator[str],
    count_tokens: Callable[[str], int],
    length: int,
    depth: float,
    rng: random.Random,
    keys: list[str] | None = None,
    digits: int = KEY_DIGITS,
) -> dict:
    """One example of about `length` tokens: sentences from `haystack` with the needle after the share `depth`
    of them (in tokens), the question last; its key one of `keys`, or `digits` different digits."""
    key = rng.choice(keys) if keys else "".join(rng.sample("0123456789", digits))  # no digit twice
    needle = NEEDLE.format(key=key)
    fixed = count_tokens(needle) + count_tokens(QUESTION)
    if fixed >= length:
        raise DataError(f"a passkey example of {length} tokens has no room for a haystack ({fixed} tokens are fixed)")
    filler, counts = [], []
    while sum(counts) < length - fixed:
        filler.append(next(haystack))
        counts.append(count_tokens(filler[-1]))
    while len(filler) > 1 and sum(counts) > length - fixed:  # the last sentence made it too long
        filler.pop()
        counts.pop()
    target, before, at = depth * sum(counts), 0, 0
    while at < len(filler) and before + counts[at] / 2 < target:  # the sentence end nearest the depth
        before += counts[at]
        at += 1
    source = " ".join([*filler[:at], needle, *filler[at:], QUESTION])
    return {
        "source": source,
        "target": key,
        "length": count_tokens(source),
        "depth": round(before / max(1, sum(counts)), 4),
    }


def passkey_examples(
    documents: Iterable[str],
    count_tokens: Callable[[str], int],
    lengths: list[int],
    depths: list[float] | None,
    per_cell: int,
    seed: int = 0,
    keys: list[str] | None = None,
    digits: int = KEY_DIGITS,
) -> Iterator[dict]:
    """`per_cell` examples of each length and depth (a grid to score by depth), or with `depths` None as many
    of each length at depths drawn uniformly (to train on); keys from `keys`, or digits."""
    rng = random.Random(seed)
    haystack = sentences(documents)
    for length in lengths:
        for depth in depths if depths is not None else [None]:
            for _ in range(per_cell):
                at = rng.random() if depth is None else depth
                yield passkey_example(haystack, count_tokens, length, at, rng, keys, digits)
