"""SentencePiece models from disk (e.g. Mistral's 32,000 pieces) with the project's specials.

The specials are appended after the base pieces exactly as ROT5 added them:
pad, `[MASK-0]` .. `[MASK-{N-1}]`, a decoder-start token (N = 500 gives
32,000 + 502 = 32,502 ids). BOS and EOS are the model's own (`<s>`, `</s>`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from encdec.errors import DataError
from encdec.safe_paths import atomic_path, output_dir
from encdec.tokenizers.base import Tokenizer

MODEL_FILE = "tokenizer.model"


class SentencePieceTokenizer(Tokenizer):
    kind = "sentencepiece"

    def __init__(self, model_file: str | Path, num_sentinels: int = 500, extra_specials: tuple[str, ...] = ()):
        import sentencepiece

        self.model_file = Path(model_file)
        if not self.model_file.is_file():
            raise DataError(f"SentencePiece model {self.model_file} does not exist")
        self._model = self.model_file.read_bytes()
        try:
            self.processor = sentencepiece.SentencePieceProcessor(model_proto=self._model)
        except Exception as error:  # sentencepiece raises RuntimeError or its own parse errors
            raise DataError(f"SentencePiece model {self.model_file} does not parse ({error})") from None
        self.num_sentinels = num_sentinels
        self.extra_specials = tuple(extra_specials)
        base = self.processor.get_piece_size()
        bos, eos = self.processor.bos_id(), self.processor.eos_id()
        if bos < 0 or eos < 0:
            raise DataError(f"SentencePiece model {self.model_file} has no BOS or EOS piece")
        own = {self.processor.id_to_piece(bos): bos, self.processor.id_to_piece(eos): eos}
        self.append_specials(base, own, eos_id=eos, bos_id=bos)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return self.processor.encode(texts, out_type=int)

    def _decode_base(self, ids: list[int], continuation: bool = False) -> str:
        text = self.processor.decode(ids)
        # SentencePiece drops the word-boundary space of the first piece; keep it after a special token
        if continuation and self.processor.id_to_piece(ids[0]).startswith("\u2581"):
            text = " " + text
        return text

    def _model_bytes(self) -> bytes:
        return self._model

    def save(self, directory: str | Path) -> Path:
        directory = output_dir(directory, "the tokenizer directory")
        target = directory / MODEL_FILE
        if target.resolve() != self.model_file.resolve():
            with atomic_path(target) as tmp:  # a link at `target` is replaced, not written through
                shutil.copyfile(self.model_file, tmp)
        return self.save_manifest(directory, model_file=MODEL_FILE)
