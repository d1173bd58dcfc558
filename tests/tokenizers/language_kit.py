"""Multilingual Hugging Face tokenizers built offline from tiny vocabularies, for tests of language codes:
NLLB's (its default and legacy placements), M2M100's, mBART's and mBART-50's, each with three of its codes."""

import json

import pytest

from tests.conftest import SHARED_DATA

transformers = pytest.importorskip("transformers")

NLLB_CODES = ["eng_Latn", "fra_Latn", "deu_Latn", "spa_Latn"]
PIECES = [("\u2581", -2.0), *((c, -3.0) for c in "abcdefghijklmnopqrstuvwxyz"), ("\u2581the", -1.0), ("at", -1.5)]


def nllb(**kwargs):
    """NLLB's tokenizer over letters and a few merges, four codes (nothing downloaded)."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in [*"\u2581abcdefghijklmnopqrstuvwxyz", "\u2581t", "\u2581th", "\u2581the", "at"]:
        vocab.setdefault(piece, len(vocab))
    merges = [("\u2581", "t"), ("\u2581t", "h"), ("\u2581th", "e"), ("a", "t")]
    return transformers.NllbTokenizer(vocab=vocab, merges=merges, additional_special_tokens=NLLB_CODES, **kwargs)


def m2m100(directory, **kwargs):
    """M2M100's own tokenizer: vocab.json and the shared SentencePiece model; its codes en, fr, ... (__en__)."""
    import sentencepiece

    model_file = SHARED_DATA / "tokenizers/mistral_tokenizer.model.v1"
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in map(pieces.id_to_piece, range(pieces.get_piece_size())):
        vocab.setdefault(piece, len(vocab))
    (directory / "vocab.json").write_text(json.dumps(vocab))
    (directory / "sentencepiece.bpe.model").write_bytes(model_file.read_bytes())
    return transformers.M2M100Tokenizer(directory / "vocab.json", directory / "sentencepiece.bpe.model", **kwargs)


def mbart(**kwargs):
    """mBART's tokenizer (cc25's codes, en_XX ...) over a unigram vocabulary of letters."""
    specials = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    return transformers.MBartTokenizer(vocab=specials + PIECES, **kwargs)


def mbart50(**kwargs):
    """mBART-50's tokenizer (its 52 codes) over a SentencePiece-ordered unigram vocabulary of letters."""
    return transformers.MBart50Tokenizer(vocab=[("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0), *PIECES], **kwargs)


FAMILIES = {  # name -> (a tokenizer made with keyword arguments, three of its codes)
    "nllb": (lambda tmp, **kw: nllb(**kw), ["fra_Latn", "deu_Latn", "eng_Latn"]),
    "nllb-legacy": (lambda tmp, **kw: nllb(legacy_behaviour=True, **kw), ["fra_Latn", "spa_Latn", "eng_Latn"]),
    "m2m100": (m2m100, ["de", "fr", "en"]),
    "mbart": (lambda tmp, **kw: mbart(**kw), ["fr_XX", "de_DE", "en_XX"]),
    "mbart50": (lambda tmp, **kw: mbart50(**kw), ["fr_XX", "de_DE", "en_XX"]),
}
