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

from encdec.tokenizers import Tokenizer

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


def run_encoding(text, tokenizer: Tokenizer, target_template: str = "{target}", mode_id: int | None = None):
    """A run's encoding: `text` its RunTokenizer, references `target_template`d and closed by EOS as its
    seq2seq objective closed them, and UL2's [S] token (`mode_id`) before an input where it trained with
    mode tokens."""

    def encode_targets(texts: list[str]) -> list[list[int]]:
        rows = tokenizer.encode([target_template.format(target=t) for t in texts])
        return [[*row, tokenizer.eos_id] for row in rows]

    return TextEncoding(
        text,
        encode_targets,
        lambda texts: tokenizer.encode(list(texts)),
        text.max_length,
        [mode_id] if mode_id is not None else [],
    )


def hf_encoding(tokenizer, eos_id: int) -> TextEncoding:
    """A Hugging Face tokenizer's encoding (sources cut to its model_max_length). References end with the
    model's `eos_id`, where the tokenizer's `text_target` encoding does not end with it already (an
    `encdec export` tokenizer adds no special token): generation stops there, so predicting it is part of
    producing the reference, as a run's targets have it. The special tokens the tokenizer puts around an
    input are found by encoding one text with and without them."""
    prefix, suffix = input_wrapping(tokenizer)

    def encode_targets(texts: list[str]) -> list[list[int]]:
        rows = tokenizer(text_target=list(texts))["input_ids"]
        return [row if row[-1:] == [eos_id] else [*row, eos_id] for row in rows]

    return TextEncoding(
        tokenizer,
        encode_targets,
        lambda texts: tokenizer(list(texts), add_special_tokens=False)["input_ids"],
        tokenizer.model_max_length,
        prefix,
        suffix,
    )


def input_wrapping(tokenizer) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids a Hugging Face tokenizer adds before and after an input's own."""
    full = tokenizer(PROBE)["input_ids"]
    bare = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    return [], []  # the special tokens change the text's own ids: none assumed
