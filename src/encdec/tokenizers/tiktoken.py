"""GPT-2 BPE through tiktoken, as yif-AI's runs used it (optional extra `encdec[gpt2]`).

tiktoken downloads the GPT-2 ranks on first use and caches them
(`TIKTOKEN_CACHE_DIR`); without network or cache the encoding cannot be
loaded, which is a DataError. `<|endoftext|>` (50256) serves as both BOS and
EOS; pad, sentinels and decoder-start are appended after it (50257, ...).
"""

from __future__ import annotations

from pathlib import Path

from encdec.errors import DataError
from encdec.tokenizers.base import Tokenizer

END_OF_TEXT = "<|endoftext|>"


def load_encoding(name: str):
    """`tiktoken.get_encoding(name)`, turning a missing package or a failed download into a DataError."""
    try:
        import tiktoken
    except ImportError:
        raise DataError(f"tokenizer {name!r} needs tiktoken; install it with `pip install encdec[gpt2]`") from None
    try:
        return tiktoken.get_encoding(name)
    except ValueError as error:
        raise DataError(f"tiktoken does not know the encoding {name!r} ({error})") from None
    except Exception as error:  # requests' connection errors, a corrupt cache file, ...
        raise DataError(
            f"tiktoken encoding {name!r} cannot be loaded: its BPE file is neither cached nor downloadable "
            f"({type(error).__name__}); set TIKTOKEN_CACHE_DIR to a directory that holds it"
        ) from None


class TiktokenTokenizer(Tokenizer):
    kind = "tiktoken"

    def __init__(
        self,
        encoding_name: str = "gpt2",
        num_sentinels: int = 100,
        extra_specials: tuple[str, ...] = (),
        encoding=None,
    ):
        """`encoding` (a `tiktoken.Encoding`) skips loading by name; tests pass a small one."""
        self.encoding = encoding if encoding is not None else load_encoding(encoding_name)
        self.encoding_name = encoding_name
        self.num_sentinels = num_sentinels
        self.extra_specials = tuple(extra_specials)
        base = self.encoding.n_vocab
        try:
            end_of_text = self.encoding.encode_single_token(END_OF_TEXT)
        except KeyError:
            raise DataError(f"tiktoken encoding {encoding_name!r} has no {END_OF_TEXT} token") from None
        self.append_specials(base, {END_OF_TEXT: end_of_text}, eos_id=end_of_text, bos_id=end_of_text)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return self.encoding.encode_ordinary_batch(texts)

    def _decode_base(self, ids: list[int], continuation: bool = False) -> str:
        return self.encoding.decode(ids)

    def _model_bytes(self) -> bytes:
        return self.encoding_name.encode()

    def save(self, directory: str | Path) -> Path:
        return self.save_manifest(directory, encoding_name=self.encoding_name)
