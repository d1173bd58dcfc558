"""The one interface every tokenizer offers, and the special tokens they share.

Every kind (SentencePiece, Hugging Face `tokenizers`, tiktoken, bytes) keeps its
base vocabulary and appends the project's special tokens after it when they are
missing: pad, sentinels `[MASK-0]` .. `[MASK-{N-1}]` (span corruption), a
decoder-start token, and any extra names (e.g. UL2 mode tokens `[R]`, `[X]`,
`[S]`). ROT5 did the same on Mistral's 32,000 pieces: 32,000 + 502 = 32,502.

A tokenizer saves itself into a directory beside a checkpoint as its own files
plus `MANIFEST_NAME`, a small JSON file that `encdec.tokenizers.load_tokenizer`
reads back.
"""

from __future__ import annotations

import abc
import json
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from encdec.errors import ConfigError, DataError
from encdec.safe_paths import output_dir, write_atomic
from encdec.schema import Range, value_of

MANIFEST_NAME = "encdec_tokenizer.json"
# Bounds on a vocabulary, checked before any of it is built: the largest shipped vocabularies hold about 256k
# ids, and T5 has 100 sentinels, ROT5 500, UL2 and some mT5 variants a few hundred more.
MAX_VOCAB = 1 << 22
MAX_SENTINELS = 100_000  # T5 has 100, UL2 and mT5 variants a few hundred; a vocabulary padded past 65,536 more
MAX_EXTRA_SPECIALS = 1000
PAD_TOKEN = "<pad>"
DECODER_START_TOKEN = "<decoder_start>"
UL2_MODE_TOKENS = ("[R]", "[X]", "[S]")


def sentinel_token(index: int) -> str:
    """The name of the `index`-th sentinel, as ROT5 named them."""
    return f"[MASK-{index}]"


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens; `names` maps every special name to its id."""

    pad_id: int
    eos_id: int
    bos_id: int
    decoder_start_id: int
    sentinel_ids: tuple[int, ...]
    names: dict[str, int] = field(default_factory=dict)


def added_special_names(num_sentinels: int, extra_specials: tuple[str, ...] = ()) -> list[str]:
    """Names appended after a base vocabulary, in id order: pad, sentinels, decoder-start, extras."""
    check_special_counts(num_sentinels, extra_specials)
    return [PAD_TOKEN, *(sentinel_token(i) for i in range(num_sentinels)), DECODER_START_TOKEN, *extra_specials]


def check_special_counts(num_sentinels: int, extra_specials: tuple[str, ...] = ()) -> None:
    """ConfigError, naming the figure, for a sentinel count or extra special names a vocabulary cannot hold
    (a billion sentinels would be a billion strings built before anything else happens)."""
    value_of(Annotated[int, Range(0, MAX_SENTINELS)], num_sentinels, "num_sentinels")
    if len(extra_specials) > MAX_EXTRA_SPECIALS or not all(isinstance(name, str) for name in extra_specials):
        raise ConfigError(
            f"extra_specials must be at most {MAX_EXTRA_SPECIALS:,} names (strings), got {len(extra_specials):,} items"
        )


def appended_special_ids(base_size: int, names: list[str]) -> dict[str, int]:
    """Ids of special `names` appended in order after a base vocabulary of `base_size` ids, by name."""
    return {name: base_size + i for i, name in enumerate(names)}


def special_tokens(table: dict[str, int], eos_id: int, bos_id: int, num_sentinels: int) -> SpecialTokens:
    """The `SpecialTokens` of a name -> id table that holds pad, the sentinels and decoder-start by their names.

    BOS and EOS are given as ids because each kind names them differently (`</s>`, `<|endoftext|>`, ...).
    """
    return SpecialTokens(
        pad_id=table[PAD_TOKEN],
        eos_id=eos_id,
        bos_id=bos_id,
        decoder_start_id=table[DECODER_START_TOKEN],
        sentinel_ids=tuple(table[sentinel_token(i)] for i in range(num_sentinels)),
        names=table,
    )


class Tokenizer(abc.ABC):
    """Encode and decode batches of text; expose the special ids models and objectives need."""

    kind: str = ""
    specials: SpecialTokens
    num_sentinels: int = 0
    extra_specials: tuple[str, ...] = ()

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, special tokens included (the model's embedding rows)."""

    # the special ids models and objectives read, as `specials` holds them
    pad_id = property(lambda self: self.specials.pad_id)
    eos_id = property(lambda self: self.specials.eos_id)
    bos_id = property(lambda self: self.specials.bos_id)
    decoder_start_id = property(lambda self: self.specials.decoder_start_id)
    sentinel_ids = property(lambda self: list(self.specials.sentinel_ids))

    def special_id(self, name: str) -> int | None:
        """The id of a special token by name (`"[R]"`, `"<pad>"`, ...), or None."""
        return self.specials.names.get(name)

    def encode(
        self, texts: str | list[str], add_eos: bool = False, add_bos: bool = False
    ) -> list[int] | list[list[int]]:
        """Token ids of each text, optionally framed by BOS/EOS; one string gives one list of ids.

        Special-token names inside text stay ordinary text, except for the `hf` kind
        (Hugging Face `tokenizers` always matches its added tokens).
        """
        if isinstance(texts, str):
            return self.encode([texts], add_eos, add_bos)[0]
        texts = list(texts)
        if not all(isinstance(text, str) for text in texts):
            raise DataError("encode takes a string or a list of strings")
        encoded = self._encode(texts)
        head = [self.bos_id] if add_bos else []
        tail = [self.eos_id] if add_eos else []
        if head or tail:
            encoded = [head + ids + tail for ids in encoded]
        return encoded

    def decode(self, ids: list[list[int]] | list[int], skip_special: bool = True) -> list[str] | str:
        """Text of each id list; one list of ids (as `encode` gives for one string) gives one text. With
        skip_special=False specials are written by name."""
        if len(ids) and (isinstance(ids[0], numbers.Integral) or getattr(ids[0], "ndim", None) == 0):
            return self.decode([ids], skip_special)[0]
        return [self._decode_one([int(i) for i in row], skip_special) for row in ids]

    def _decode_one(self, ids: list[int], skip_special: bool) -> str:
        """Decode runs of ordinary ids with the base model and write specials by name."""
        id_to_name = {i: n for n, i in self.specials.names.items()}
        pieces: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in id_to_name or i >= self.vocab_size or i < 0:
                if run:
                    pieces.append(self._decode_base(run, continuation=bool(pieces)))
                    run = []
                if not skip_special:
                    pieces.append(id_to_name.get(i, f"<id:{i}>"))
            else:
                run.append(i)
        if run:
            pieces.append(self._decode_base(run, continuation=bool(pieces)))
        return "".join(pieces)

    @abc.abstractmethod
    def _encode(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text with the base model, without BOS/EOS."""

    @abc.abstractmethod
    def _decode_base(self, ids: list[int], continuation: bool = False) -> str:
        """Text of ids that are all ordinary (non-special) ids; `continuation` when text precedes them."""

    @abc.abstractmethod
    def save(self, directory: str | Path) -> Path:
        """Write the files needed to rebuild this tokenizer, plus the manifest; return the directory."""

    def fingerprint(self) -> str:
        """A short hash identifying this tokenizer's vocabulary and specials (for shard manifests)."""
        import hashlib

        digest = hashlib.sha256(self.kind.encode())
        digest.update(json.dumps(sorted(self.specials.names.items())).encode())
        digest.update(str(self.vocab_size).encode())
        digest.update(self._model_bytes())
        return digest.hexdigest()[:16]

    def _model_bytes(self) -> bytes:
        """The bytes of the underlying model file, for `fingerprint`."""
        return b""

    def append_specials(self, base_size: int, own: dict[str, int], eos_id: int, bos_id: int) -> None:
        """The special tokens encdec adds (added_special_names: pad, sentinels, decoder start, extra_specials) at
        the ids after the underlying vocabulary's `base_size`, beside that vocabulary's `own` special pieces: sets
        `specials` and the vocabulary size they make (`_vocab_size`)."""
        added = added_special_names(self.num_sentinels, self.extra_specials)
        table = {**appended_special_ids(base_size, added), **own}
        self.specials = special_tokens(table, eos_id=eos_id, bos_id=bos_id, num_sentinels=self.num_sentinels)
        self._vocab_size = base_size + len(added)

    def save_manifest(self, directory: str | Path, **files: str) -> Path:
        """The manifest that rebuilds this tokenizer in `directory`: its kind, the `files` it saved there, and its
        special tokens' counts (write_manifest)."""
        specials = {"num_sentinels": self.num_sentinels, "extra_specials": list(self.extra_specials)}
        return write_manifest(directory, self.kind, **files, **specials)


def write_manifest(directory: str | Path, kind: str, **options) -> Path:
    """Write `MANIFEST_NAME` with the tokenizer kind and the options that rebuild it."""
    directory = Path(directory)
    output_dir(directory, "the tokenizer directory")
    write_atomic(directory / MANIFEST_NAME, json.dumps({"kind": kind, **options}, indent=2) + "\n")
    return directory
