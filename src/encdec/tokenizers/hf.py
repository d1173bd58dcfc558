"""Hugging Face `tokenizers` JSON files, and training a new tokenizer from raw text.

`train_tokenizer` trains a byte-level BPE (GPT-2 style, every string encodes
and decodes exactly) or a unigram model (SentencePiece style, characters unseen
in training become `<unk>`) so a user can start from a corpus alone.

Unlike the other kinds, `tokenizers` matches added special tokens inside text:
the string "[MASK-0]" in a document encodes to the sentinel id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from encdec.errors import ConfigError, DataError
from encdec.safe_paths import atomic_path, output_dir
from encdec.tokenizers.base import MAX_VOCAB, Tokenizer, added_special_names, special_tokens

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
TRAINABLE_KINDS = ("bpe", "unigram")


class HFTokenizer(Tokenizer):
    """A `tokenizers.Tokenizer` with pad, eos, bos, sentinels and decoder-start added when missing."""

    kind = "hf"

    def __init__(
        self,
        tokenizer,
        num_sentinels: int = 100,
        extra_specials: tuple[str, ...] = (),
        eos_token: str = "</s>",
        bos_token: str = "<s>",
        source: str = "<memory>",
    ):
        self.tokenizer = tokenizer
        self.source = source
        self.num_sentinels = num_sentinels
        self.extra_specials = tuple(extra_specials)
        self.eos_token, self.bos_token = eos_token, bos_token
        wanted = [eos_token, bos_token, *added_special_names(num_sentinels, self.extra_specials)]
        missing = [name for name in dict.fromkeys(wanted) if tokenizer.token_to_id(name) is None]
        if missing:
            from tokenizers import AddedToken

            tokenizer.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in missing])
        table = {name: tokenizer.token_to_id(name) for name in dict.fromkeys(wanted)}
        self.specials = special_tokens(
            table, eos_id=table[eos_token], bos_id=table[bos_token], num_sentinels=num_sentinels
        )
        if len(set(table.values())) != len(table):
            raise DataError(f"tokenizer {source} maps two different special tokens to one id")

    @classmethod
    def from_file(cls, path: str | Path, **options) -> HFTokenizer:
        """Load a `tokenizer.json`; a file that does not parse is a DataError naming it."""
        from tokenizers import Tokenizer as RustTokenizer

        path = Path(path)
        if not path.is_file():
            raise DataError(f"tokenizer file {path} does not exist")
        try:
            tokenizer = RustTokenizer.from_file(str(path))
        except Exception as error:  # the Rust side raises a bare Exception with serde's message
            raise DataError(f"tokenizer file {path} does not parse as a Hugging Face tokenizer ({error})") from None
        return cls(tokenizer, source=str(path), **options)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def _decode_base(self, ids: list[int], continuation: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _model_bytes(self) -> bytes:
        return self.tokenizer.to_str().encode()

    def save(self, directory: str | Path) -> Path:
        directory = output_dir(directory, "the tokenizer directory")
        with atomic_path(directory / TOKENIZER_FILE) as tmp:  # a link there is replaced, not written through
            self.tokenizer.save(str(tmp))
        return self.save_manifest(
            directory, tokenizer_file=TOKENIZER_FILE, eos_token=self.eos_token, bos_token=self.bos_token
        )


def train_tokenizer(
    texts: Iterable[str],
    kind: str = "bpe",
    vocab_size: int = 8000,
    num_sentinels: int = 100,
    extra_specials: tuple[str, ...] = (),
    min_frequency: int = 2,
) -> HFTokenizer:
    """Train a byte-level BPE or a unigram tokenizer on `texts`; `vocab_size` counts the specials too."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if kind not in TRAINABLE_KINDS:
        raise ConfigError(f"tokenizer kind {kind!r} cannot be trained; choose one of {', '.join(TRAINABLE_KINDS)}")
    if vocab_size > MAX_VOCAB:
        raise ConfigError(f"vocab_size {vocab_size:,} is too large: a trained vocabulary holds at most {MAX_VOCAB:,}")
    specials = ["</s>", "<s>", *added_special_names(num_sentinels, tuple(extra_specials))]
    floor = len(specials) + (256 if kind == "bpe" else 1)
    if vocab_size <= floor:
        raise ConfigError(
            f"vocab_size {vocab_size} is too small: the specials and base alphabet need more than {floor}"
        )
    if kind == "bpe":
        tokenizer = RustTokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        tokenizer = RustTokenizer(models.Unigram())
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        specials = [*specials, "<unk>"]
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials, unk_token="<unk>", show_progress=False
        )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    logger.info("trained a %s tokenizer of %d ids", kind, tokenizer.get_vocab_size(with_added_tokens=True))
    return HFTokenizer(
        tokenizer, num_sentinels=num_sentinels, extra_specials=tuple(extra_specials), source=f"<trained {kind}>"
    )
