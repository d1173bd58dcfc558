"""A Hugging Face checkpoint's own tokenizer (transformers' AutoTokenizer) behind encdec's interface.

Fine-tuning T5, Flan-T5, mT5, BART, mBART or Marian from a local Hugging Face
directory keeps the tokenizer the checkpoint was trained with: its pad and EOS
ids, T5's sentinels `<extra_id_0>`, `<extra_id_1>`, ... (span corruption) and
the decoder-start id of the directory's config.json. Nothing is added to the
vocabulary, so the checkpoint's embeddings keep their meaning. It saves itself
with `save_pretrained`, so a run's tokenizer directory is also a Hugging Face one.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from encdec.errors import ConfigError, DataError
from encdec.safe_paths import output_dir, staged_files
from encdec.tokenizers.base import MAX_SENTINELS, SpecialTokens, Tokenizer, write_manifest

# files one of which a directory needs before AutoTokenizer can build a tokenizer from it
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "spiece.model",
    "tokenizer.model",  # Gemma's and Llama's SentencePiece model
    "sentencepiece.bpe.model",
    "source.spm",
    "vocab.json",
    "vocab.txt",
)


def has_tokenizer_files(directory: Path) -> bool:
    return any((directory / name).is_file() for name in TOKENIZER_FILES)


def check_tokenizer_files(directory: Path) -> None:
    """One sentence (DataError) where the Hugging Face model directory `directory` holds no tokenizer."""
    if not has_tokenizer_files(directory):
        raise DataError(
            f"{directory} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...); "
            "copy the tokenizer of the checkpoint there"
        )


class PretrainedTokenizer(Tokenizer):
    """A `transformers` tokenizer; `hf` is the tokenizer itself, for code that wants HF's interface."""

    kind = "pretrained"

    def __init__(self, hf_tokenizer, decoder_start_id: int | None = None, source: str = "<memory>"):
        self.hf = hf_tokenizer
        self.source = source
        pad, eos = hf_tokenizer.pad_token_id, end_token_id(hf_tokenizer)
        if eos is None:
            raise DataError(f"the tokenizer of {source} has no end-of-sequence token, which encdec's objectives need")
        pad = eos if pad is None else pad  # GPT-2 style tokenizers pad with EOS
        bos = hf_tokenizer.bos_token_id
        sentinels = []
        for index in range(MAX_SENTINELS):
            token_id = hf_tokenizer.convert_tokens_to_ids(f"<extra_id_{index}>")
            if token_id is None or token_id == hf_tokenizer.unk_token_id:
                break
            sentinels.append(token_id)
        names = dict(zip(hf_tokenizer.all_special_tokens, hf_tokenizer.all_special_ids))
        added = getattr(hf_tokenizer, "added_tokens_decoder", {})  # special tokens added by name alone (Whisper's)
        names |= {
            token.content: index for index, token in added.items() if token.special and token.content not in names
        }
        self.specials = SpecialTokens(
            pad_id=pad,
            eos_id=eos,
            bos_id=eos if bos is None else bos,  # T5 has no BOS
            decoder_start_id=pad if decoder_start_id is None else decoder_start_id,
            sentinel_ids=tuple(sentinels),
            names=names,
        )

    @classmethod
    def from_directory(cls, directory: str | Path, decoder_start_id: int | None = None) -> PretrainedTokenizer:
        """Load the tokenizer of a Hugging Face model directory; its config.json gives the decoder-start id.

        A directory without tokenizer files, or one AutoTokenizer cannot read, is one sentence (DataError).
        """
        directory = Path(directory)
        check_tokenizer_files(directory)
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ConfigError("reading a Hugging Face tokenizer needs transformers: pip install 'encdec[hf]'") from None
        try:
            with quiet_transformers():
                hf_tokenizer = AutoTokenizer.from_pretrained(directory)
        except Exception as error:  # transformers raises OSError, ValueError, KeyError, ... on unreadable files
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise DataError(f"{directory} has no tokenizer transformers can read ({first[:160]})") from None
        if len(hf_tokenizer) == 0:
            raise DataError(f"the tokenizer in {directory} has an empty vocabulary")
        if decoder_start_id is None:
            decoder_start_id = read_decoder_start_id(directory)
        return cls(hf_tokenizer, decoder_start_id, source=str(directory))

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return self.hf(texts, add_special_tokens=False)["input_ids"]

    def _decode_base(self, ids: list[int], continuation: bool = False) -> str:
        return self.hf.decode(ids, skip_special_tokens=False)

    def _model_bytes(self) -> bytes:
        return json.dumps(self.hf.get_vocab(), sort_keys=True).encode()

    def save(self, directory: str | Path) -> Path:
        directory = output_dir(directory, "the tokenizer directory")
        with staged_files(directory) as stage:  # each file renamed into place: a link there is replaced
            self.hf.save_pretrained(stage)
        return write_manifest(directory, self.kind, decoder_start_id=self.decoder_start_id)


def end_token_id(hf_tokenizer) -> int | None:
    """The token a sequence ends with: the tokenizer's EOS, else, where it names none, the separator it closes
    every text with (FSMT's and XLM's `</s>`, fairseq's end of sentence); None without either."""
    if hf_tokenizer.eos_token_id is not None or hf_tokenizer.sep_token_id is None:
        return hf_tokenizer.eos_token_id
    closing = hf_tokenizer("a")["input_ids"][-1:]
    return hf_tokenizer.sep_token_id if closing == [hf_tokenizer.sep_token_id] else None


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings silenced while it reads a directory (a config.json's model_type it does not know,
    say): whether the tokenizer loads is what counts, and a refusal is then encdec's one sentence."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def read_decoder_start_id(directory: Path) -> int | None:
    """decoder_start_token_id from the directory's config.json (or generation_config.json), if it says."""
    for name in ("generation_config.json", "config.json"):
        path = directory / name
        if path.is_file():
            try:
                value = json.loads(path.read_text()).get("decoder_start_token_id")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(value, int):
                return value
    return None
