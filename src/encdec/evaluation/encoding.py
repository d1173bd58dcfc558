"""How `encdec evaluate` turns a test file's texts into the token ids of the model it scores: `TextEncoding`.

Sources go through the model's own text encoder (`text`: a run's RunTokenizer or a Hugging Face
tokenizer), the one generation uses, so they are cut to the same length. References are
encoded as the model was taught to emit them: a run's target template and EOS, as its seq2seq
objective made its targets; a Hugging Face tokenizer's `text_target` encoding, as transformers
makes labels, closed by EOS where the tokenizer adds none. Documents are encoded without special tokens (the scorer adds the EOS that
closes each one, encdec.evaluation.likelihood).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from encdec.data.objectives.seq2seq import pair_ends
from encdec.generation.text_generator import TextGenerator
from encdec.tokenizers import Tokenizer
from encdec.tokenizers.languages import code_placement, in_language, target_language

PROBE = "a b"  # a text encoded with and without special tokens: what is added is the input's wrapping


@dataclass
class TextEncoding:
    """A model's text encoding, as the evaluation scores it."""

    text: Any  # sources -> {"input_ids", "attention_mask"} (Hugging Face's tokenizer call); decode, batch_decode
    encode_targets: Callable[[list[str]], list[list[int]]]  # references as the decoder emits them, EOS-ended
    encode_documents: Callable[[list[str]], list[list[int]]]  # text without special tokens
    source_length: int  # the longest input the model takes: sources are cut to it, documents windowed by it
    input_prefix: Sequence[int] = field(default_factory=list)  # special tokens before an input: a mode token, <s>
    input_suffix: Sequence[int] = field(default_factory=list)  # after it: T5's </s>
    src_lang: str | None = None  # the language sources are encoded in (a multilingual tokenizer's code)
    decoder_start: int | None = None  # references scored from it (mBART's: the target's code); None: the model's

    def encode_sources(self, sources: list[str]) -> dict:
        """Sources as generation gets them (TextGenerator.encode): input_ids, attention_mask (B, S)."""
        return TextGenerator(self.text).encode(sources, self.src_lang)


def run_encoding(
    text,
    tokenizer: Tokenizer,
    target_template: str = "{target}",
    mode_id: int | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
):
    """A run's encoding: `text` its RunTokenizer, sources in `src_lang` (else the language the run was trained
    in), references `target_template`d and closed by EOS as its seq2seq objective closed them, with the codes of
    `tgt_lang` (else its trained one) where the run has codes, and UL2's [S] token (`mode_id`) before an input
    where it trained with mode tokens."""
    code = text.language("tgt_lang", tgt_lang)
    if code is not None:
        text.multilingual("tgt_lang")  # a run without codes: one sentence, before any work
    ends = pair_ends(tokenizer, None, code)

    def encode_targets(texts: list[str]) -> list[list[int]]:
        rows = tokenizer.encode([target_template.format(target=t) for t in texts])
        return [[*ends.target_start, *row, *ends.target_end] for row in rows]

    return TextEncoding(
        text,
        encode_targets,
        lambda texts: tokenizer.encode(list(texts)),
        text.max_length,
        [mode_id] if mode_id is not None else [],
        src_lang=src_lang,
        decoder_start=ends.decoder_start if code is not None else None,
    )


def opened_encoding(opened, src_lang: str | None = None, tgt_lang: str | None = None) -> TextEncoding:
    """The encoding of a model opened by encdec.runs.open.open_model: a run's (its templates, its UL2 [S] token)
    or its Hugging Face tokenizer's, in the languages `src_lang` (inputs) and `tgt_lang` (references)."""
    if opened.run is None:
        return hf_encoding(opened.text, opened.model.config.eos_id, src_lang, tgt_lang)
    text, tokenizer = opened.run.description.text, opened.run.tokenizer
    mode = tokenizer.special_id("[S]") if text.mode_tokens else None
    return run_encoding(opened.run.text, tokenizer, text.target_template, mode, src_lang, tgt_lang)


def hf_encoding(tokenizer, eos_id: int, src_lang: str | None = None, tgt_lang: str | None = None) -> TextEncoding:
    """A Hugging Face tokenizer's encoding (sources cut to its model_max_length), sources in `src_lang` and
    references in `tgt_lang` where given (their codes placed as the tokenizer places its own, the tokenizer
    left as it is; an unknown code is one sentence here, before any work). References end with the
    model's `eos_id`, where the tokenizer's `text_target` encoding does not end with it already (an
    `encdec export` tokenizer adds no special token): generation stops there, so predicting it is part of
    producing the reference, as a run's targets have it. The special tokens the tokenizer puts around an
    input are its src_lang's, else found by encoding one text with and without them."""
    prefix, suffix = code_placement(tokenizer, src_lang) if src_lang is not None else input_wrapping(tokenizer)
    if tgt_lang is not None:
        code_placement(tokenizer, tgt_lang, "tgt_lang")

    def encode_targets(texts: list[str]) -> list[list[int]]:
        if tgt_lang is not None:  # as text_target encodes them once the tokenizer's tgt_lang is tgt_lang
            rows = in_language(tokenizer, list(texts), tgt_lang, "tgt_lang", cut=False)
        else:
            rows = tokenizer(text_target=list(texts))["input_ids"]
        return [row if row[-1:] == [eos_id] else [*row, eos_id] for row in rows]

    return TextEncoding(
        tokenizer,
        encode_targets,
        lambda texts: tokenizer(list(texts), add_special_tokens=False)["input_ids"],
        tokenizer.model_max_length,
        prefix,
        suffix,
        src_lang,
        target_language(tokenizer, tgt_lang)[1] if tgt_lang is not None else None,
    )


def input_wrapping(tokenizer) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids a Hugging Face tokenizer adds before and after an input's own."""
    full = tokenizer(PROBE)["input_ids"]
    bare = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    return [], []  # the special tokens change the text's own ids: none assumed
