"""Tokenizers behind one interface: `build_tokenizer` makes one, `load_tokenizer` reads one saved beside a checkpoint.

Kinds: `sentencepiece` (a `.model` file), `hf` (a `tokenizers` JSON file),
`bpe` / `unigram` (trained on texts with `tokenizers`), `tiktoken` (GPT-2),
`byte` (no files), `pretrained` (a Hugging Face model directory's own tokenizer,
through transformers' AutoTokenizer).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from encdec.errors import ConfigError, DataError
from encdec.safe_paths import inside
from encdec.schema import Count, Range, load_json, read, short
from encdec.tokenizers.base import (
    MANIFEST_NAME,
    MAX_SENTINELS,
    UL2_MODE_TOKENS,
    SpecialTokens,
    Tokenizer,
    check_special_counts,
    sentinel_token,
)
from encdec.tokenizers.byte import ByteTokenizer

KINDS = ("byte", "sentencepiece", "hf", "bpe", "unigram", "tiktoken", "pretrained")


def build_tokenizer(
    kind: str, path: str | Path | None = None, texts: Iterable[str] | None = None, **options
) -> Tokenizer:
    """Make a tokenizer of `kind`; `path` is the model file (sentencepiece, hf), `texts` the corpus (bpe, unigram).

    `options` go to the constructor: `num_sentinels`, `extra_specials`, and for
    trained kinds `vocab_size`, for tiktoken `encoding_name`.
    """
    if kind == "byte":
        return ByteTokenizer(**options)
    if kind == "sentencepiece":
        from encdec.tokenizers.sentencepiece import SentencePieceTokenizer

        if path is None:
            raise ConfigError("tokenizer kind 'sentencepiece' needs the path of a .model file")
        return SentencePieceTokenizer(path, **options)
    if kind == "hf":
        from encdec.tokenizers.hf import HFTokenizer

        if path is None:
            raise ConfigError("tokenizer kind 'hf' needs the path of a tokenizer.json file")
        return HFTokenizer.from_file(path, **options)
    if kind in ("bpe", "unigram"):
        from encdec.tokenizers.hf import train_tokenizer

        if texts is None:
            raise ConfigError(f"tokenizer kind {kind!r} is trained and needs texts")
        return train_tokenizer(texts, kind=kind, **options)
    if kind == "tiktoken":
        from encdec.tokenizers.tiktoken import TiktokenTokenizer

        return TiktokenTokenizer(**options)
    if kind == "pretrained":
        from encdec.tokenizers.pretrained import PretrainedTokenizer

        if path is None:
            raise ConfigError("tokenizer kind 'pretrained' needs the path of a Hugging Face model directory")
        return PretrainedTokenizer.from_directory(path)
    raise ConfigError(f"unknown tokenizer kind {short(kind)}; choose one of {', '.join(KINDS)}")


@dataclass
class TokenizerManifest:
    """MANIFEST_NAME in a saved tokenizer's directory, as each kind's `save` writes it."""

    kind: Literal[KINDS]
    num_sentinels: Annotated[int, Range(0, MAX_SENTINELS)] = 100
    extra_specials: list[str] = field(default_factory=list)
    model_file: str | None = None  # sentencepiece: a name inside the directory
    tokenizer_file: str | None = None  # hf: a name inside the directory
    eos_token: str | None = None
    bos_token: str | None = None
    encoding_name: str = "gpt2"  # tiktoken
    decoder_start_id: Count | None = None  # pretrained


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Rebuild the tokenizer that `Tokenizer.save(directory)` wrote, or read a Hugging Face directory's own."""
    from encdec.tokenizers.pretrained import PretrainedTokenizer, has_tokenizer_files

    directory = Path(directory)
    manifest_path = inside(directory, MANIFEST_NAME, "tokenizer manifest", DataError)
    if not manifest_path.is_file() and (has_tokenizer_files(directory) or (directory / "config.json").is_file()):
        return PretrainedTokenizer.from_directory(directory)  # a Hugging Face directory
    if not manifest_path.is_file():
        raise DataError(f"tokenizer directory {directory} has no {MANIFEST_NAME} and no Hugging Face tokenizer files")
    try:
        manifest = asdict(read(TokenizerManifest, load_json(manifest_path, "tokenizer manifest", DataError)))
    except ConfigError as error:
        raise DataError(f"tokenizer manifest {manifest_path}: {error}") from None
    kind = manifest["kind"]
    common = manifest_specials(manifest, manifest_path)
    if kind == "byte":
        return ByteTokenizer(**common)
    if kind == "sentencepiece":
        return build_tokenizer(kind, _named_file(directory, manifest, "model_file"), **common)
    if kind == "hf":
        tokens = {key: manifest[key] for key in ("eos_token", "bos_token") if manifest[key] is not None}
        return build_tokenizer(kind, _named_file(directory, manifest, "tokenizer_file"), **common, **tokens)
    if kind == "tiktoken":
        return build_tokenizer(kind, encoding_name=manifest["encoding_name"], **common)
    if kind == "pretrained":
        return PretrainedTokenizer.from_directory(directory, manifest.get("decoder_start_id"))
    raise DataError(f"tokenizer manifest {manifest_path} names an unknown kind {kind!r}")


def manifest_specials(manifest: dict, manifest_path: Path) -> dict:
    """The manifest's num_sentinels and extra_specials, checked before a vocabulary is built from them."""
    specials = {
        "num_sentinels": manifest.get("num_sentinels", 100),
        "extra_specials": manifest.get("extra_specials", []),
    }
    if not isinstance(specials["extra_specials"], list):
        raise DataError(f"tokenizer manifest {manifest_path}: extra_specials must be a list of names")
    specials["extra_specials"] = tuple(specials["extra_specials"])
    try:
        check_special_counts(**specials)
    except ConfigError as error:
        raise DataError(f"tokenizer manifest {manifest_path}: {error}") from None
    return specials


def _named_file(directory: Path, manifest: dict, key: str) -> Path:
    """The file `manifest[key]` names, which must lie inside `directory` (no absolute path, `..` or symlink)."""
    if manifest.get(key) is None:
        raise DataError(f"tokenizer manifest in {directory} has no {key!r}")
    return inside(directory, manifest[key], f"tokenizer manifest's {key}", DataError)


__all__ = [
    "KINDS",
    "MANIFEST_NAME",
    "UL2_MODE_TOKENS",
    "ByteTokenizer",
    "SpecialTokens",
    "Tokenizer",
    "build_tokenizer",
    "load_tokenizer",
    "sentinel_token",
]
