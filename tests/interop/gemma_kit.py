"""What the T5Gemma and T5Gemma 2 tests share: Gemma's special tokens, a tiny vocabulary and texts, and a
Gemma-shaped tokenizer.json trained on them."""

import pytest

tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # Gemma's, at its ids 0, 1, 2, 3
VOCAB = 64
TEXTS = ["the cat sat on the mat and then the dog ran far away", "a dog came home", "sleep"]


def tokenizer_json(path) -> None:
    """A Gemma-shaped tokenizer.json (BPE pieces over text whose spaces are "▁", Gemma's special tokens at its
    ids 0-3) trained on TEXTS, the directory's only tokenizer file: transformers builds Gemma's pipeline
    around its pieces and merges, as it does for a released checkpoint's."""
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    backend.normalizer = tokenizers.normalizers.Replace(" ", "\u2581")
    # one id short of the model's: transformers adds Gemma's <mask>
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=VOCAB - 1, special_tokens=SPECIALS, show_progress=False)
    backend.train_from_iterator(TEXTS * 4, trainer)
    backend.save(str(path / "tokenizer.json"))
