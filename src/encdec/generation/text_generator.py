"""Text in, text out: the one text generator of `encdec generate`, `encdec evaluate` (and the trainer's
generating evaluation) and the server.

    generator = TextGenerator(opened.text, opened.generation)
    encoded = generator.encode(["The cat sat."], src_lang="eng_Latn")      # input_ids, attention_mask (B, S)
    ids = generate(model, encoded["input_ids"], encoded["attention_mask"], **generator.options(tgt_lang="fra_Latn"))
    generator.decode(ids)                                                  # ["Le chat ..."]

or `generator(model, texts, **options)` for the three at once. `text` is the model's own text encoding: a
run's `RunTokenizer` (its source template, the length it trained with, its padding side) or a Hugging Face
directory's tokenizer. A source language is an argument of `encode`: its code is put where the tokenizer puts
its own (tokenizers.languages.encode_in), the tokenizer is never changed, so requests in different languages
encode at once on a server's threads. `options` hands `generate` the Hugging Face tokenizer that src_lang,
tgt_lang (its code forced first) and stop_strings read, MBR's decoding of its samples (generation.mbr), and the
checkpoint's defaults; the server passes the same options to its scheduler, which runs them as `generate` does.
"""

from dataclasses import dataclass
from typing import Any

import torch

from encdec.generation.generate import generate, whisper_decodes
from encdec.tokenizers.languages import encode_in, hf_tokenizer_of, source_tokenizer


@dataclass(frozen=True)
class TextGenerator:
    """A model's text encoding and generation defaults, as every caller that generates text uses them."""

    text: Any  # texts -> {"input_ids", "attention_mask"} (Hugging Face's tokenizer call); decode, batch_decode
    defaults: dict | None = None  # the options generation starts from (a checkpoint's); None: the model's own

    @property
    def tokenizer(self):
        """The Hugging Face tokenizer behind `text` (itself, or a run's pretrained one), or None."""
        return hf_tokenizer_of(self.text)

    def encode(self, texts: list[str], src_lang: str | None = None) -> dict[str, torch.Tensor]:
        """`texts` as the model's inputs: input_ids and attention_mask (B, S), cut and padded as the text
        encoding does (a run's in the source language it was trained in); with `src_lang`, that language's
        code placed as the tokenizer places its own (one sentence where the tokenizer has no such code)."""
        if src_lang is None:
            return self.text(texts, return_tensors="pt", padding=True, truncation=True)
        if self.text is self.tokenizer:  # a Hugging Face tokenizer, left as it is
            return encode_in(source_tokenizer(self.text, src_lang), texts, src_lang)
        return self.text(texts, return_tensors="pt", padding=True, truncation=True, src_lang=src_lang)  # a run's

    def options(self, **options) -> dict[str, Any]:
        """`options` as `generate` (and the server's scheduler) take them: with the tokenizer that src_lang,
        tgt_lang and stop_strings need, and the defaults they override (a run's target language among them)."""
        given = {"tokenizer": self.tokenizer} if self.tokenizer is not None else {}
        if options.get("mbr", (self.defaults or {}).get("mbr")) is not None:  # MBR's utility compares texts
            given["mbr_decode"] = self.decode
        trained = getattr(self.text, "language_defaults", None)  # a run's: the target language it was trained in
        languages = trained(options) if trained is not None else {}
        return given | ({"defaults": self.defaults} if self.defaults is not None else {}) | languages | options

    def generate(self, model, encoded: dict[str, torch.Tensor], **options) -> torch.Tensor:
        """The token ids `generate` gives for `encoded` under `options`: (R, L), on the host, the decoder's start
        first (Whisper's rules give the new tokens alone: the start is put before them)."""
        options = self.options(**options)
        ids = generate(model, encoded["input_ids"], encoded["attention_mask"], **options).cpu()
        if whisper_decodes(model, **options):
            ids = torch.cat([torch.full((len(ids), 1), model.config.decoder_start_id, dtype=ids.dtype), ids], 1)
        return ids

    def decode(self, ids: torch.Tensor) -> list[str]:
        """Each row of `ids` (R, L), the decoder's start token first, as text: special tokens dropped, stripped."""
        return [text.strip() for text in self.text.batch_decode(ids[:, 1:], skip_special_tokens=True)]

    def decode_tokens(self, ids: list[int]) -> str:
        """The text of the tokens generated so far (a stream's), special tokens dropped, not stripped."""
        return self.text.decode(ids, skip_special_tokens=True)

    def __call__(self, model, texts: list[str], **options) -> list[str]:
        """An output for each of `texts` (num_return_sequences of them each), generated under `options`."""
        encoded = self.encode(texts, options.get("src_lang"))
        return self.decode(self.generate(model, encoded, **options))
