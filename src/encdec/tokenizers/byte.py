"""A tokenizer over UTF-8 bytes that needs no files: for tests and tiny runs.

Ids 0..255 are the bytes; the specials follow: pad 256, eos 257, bos 258,
sentinels, decoder-start, extras.
"""

from __future__ import annotations

from pathlib import Path

from encdec.tokenizers.base import (
    DECODER_START_TOKEN,
    PAD_TOKEN,
    Tokenizer,
    appended_special_ids,
    check_special_counts,
    sentinel_token,
    special_tokens,
)


class ByteTokenizer(Tokenizer):
    kind = "byte"

    def __init__(self, num_sentinels: int = 100, extra_specials: tuple[str, ...] = ()):
        check_special_counts(num_sentinels, tuple(extra_specials))
        self.num_sentinels = num_sentinels
        self.extra_specials = tuple(extra_specials)
        names = [PAD_TOKEN, "</s>", "<s>", *(sentinel_token(i) for i in range(num_sentinels)), DECODER_START_TOKEN]
        names += list(self.extra_specials)
        table = appended_special_ids(256, names)
        self.specials = special_tokens(table, eos_id=table["</s>"], bos_id=table["<s>"], num_sentinels=num_sentinels)
        self._vocab_size = 256 + len(names)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return [list(text.encode("utf-8")) for text in texts]

    def _decode_base(self, ids: list[int], continuation: bool = False) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def save(self, directory: str | Path) -> Path:
        return self.save_manifest(directory)
