"""Text in and out of a trained run's model, as its training fed it: `TextFormat` and `RunTokenizer`.

`TextFormat` is what a checkpoint keeps of it (text.json): the source and target templates, UL2's mode
token, the side a batch is padded on, the length sources were cut to and the languages it was trained in
(data.src_lang / tgt_lang: each direction's codes, placed as the run's multilingual tokenizer places them); `TextObjective` is the part of a
run config's objective section it follows from. `encdec generate`, `encdec evaluate`, the trainer's
generating evaluation and the server all encode a run's text through `RunTokenizer`, handed to the one
`generation.text_generator.TextGenerator`: the run's source template applied, inputs cut to the length it
was trained with, batches padded on the side its family continues from. It speaks the small part of
Hugging Face's tokenizer interface the generator uses, so a Hugging Face directory's own tokenizer can
stand in its place.
"""

import string
from dataclasses import dataclass, field
from typing import Annotated, Literal

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.generation.config import LanguageCode
from encdec.models import FAMILY_CLASSES, ModelConfig
from encdec.models.causal_lm_shared import PromptedLM
from encdec.schema import Range, short
from encdec.tokenizers import Tokenizer
from encdec.tokenizers.languages import code_placement, code_tokens
from encdec.tokenizers.padding import padded

MAX_LENGTH = 1 << 20  # tokens of a sequence: the longest a run config or a checkpoint's text.json declares
MAX_DIRECTIONS = 64  # a run's directions are its data sections': data.mixture's members at most (MAX_MEMBERS)


@dataclass(frozen=True)
class Template:
    """A source or target template: it may name only `{field}`, plainly (no other key, attribute,
    index or format spec), so it cannot fail minutes into a run or read an object's attributes."""

    field: str

    def check(self, template: str, key: str, base: type) -> None:
        try:
            parts = list(string.Formatter().parse(template))
        except ValueError as error:
            raise ConfigError(f"{key} is not a valid template ({error}); write braces as {{{{ and }}}}") from None
        for _, name, spec, conversion in parts:
            if name is None:
                continue
            if name != self.field or spec or conversion:
                shown = "{" + name + ("!" + conversion if conversion else "") + (":" + spec if spec else "") + "}"
                raise ConfigError(f"{key} may contain only {{{self.field}}}, got {short(shown)}")


SourceTemplate = Annotated[str, Template("source")]
TargetTemplate = Annotated[str, Template("target")]


@dataclass(frozen=True)
class Direction:
    """A direction a run was trained in: its sources' and targets' language codes (None: no code that side)."""

    src_lang: LanguageCode | None = None
    tgt_lang: LanguageCode | None = None

    def __str__(self) -> str:
        return f"{self.src_lang or '(none)'} -> {self.tgt_lang or '(none)'}"


@dataclass
class TextFormat:
    """How a run's model takes and gives text, as a checkpoint keeps it (text.json): every field is needed."""

    source_template: SourceTemplate  # "{source}" but for a seq2seq run's own ("summarize: {source}")
    target_template: TargetTemplate  # how references were written as targets ("{target}" but for seq2seq)
    mode_tokens: bool  # UL2's [S] token went before every input (objective.mode_tokens)
    padding_side: Literal["left", "right"]  # left for the causal families, whose prompts continue at the end
    source_length: Annotated[int, Range(1, MAX_LENGTH)]  # inputs are cut to it, as training cut its sources
    languages: list[Direction] = field(default_factory=list)  # the directions trained; [] without codes (and before)

    def __post_init__(self):
        if len(self.languages) > MAX_DIRECTIONS:
            raise ConfigError(
                f"languages lists {len(self.languages):,} directions; a run trains in at most {MAX_DIRECTIONS}"
            )


@dataclass
class TextObjective:
    """The keys of a run config's objective section that decide its TextFormat (the section declares the rest)."""

    kind: str = "ul2"
    seq_len: Annotated[int, Range(2, MAX_LENGTH)] = 256  # causal LM window / document chunk length
    max_source_len: Annotated[int, Range(1, MAX_LENGTH)] = 512
    source_template: SourceTemplate = "{source}"  # seq2seq; ROT5: "{source}\nSummary:"
    target_template: TargetTemplate = "{target}"
    mode_tokens: bool = False

    def text_format(self, padding_side: str, languages: list[Direction] | None = None) -> TextFormat:
        """A seq2seq run's templates, source length and `languages`, or for the denoising and LM objectives plain
        text cut to their chunks."""
        seq2seq = self.kind == "seq2seq"
        return TextFormat(
            self.source_template if seq2seq else "{source}",
            self.target_template if seq2seq else "{target}",
            self.mode_tokens,
            padding_side,
            self.max_source_len if seq2seq else self.seq_len,
            list(languages or []) if seq2seq else [],
        )


class RunTokenizer:
    """An encdec tokenizer behind the small part of Hugging Face's tokenizer interface used here.

    `padding_side` "left" pads a batch as the causal families' prompts need it (see `padding_side_for`).
    `languages` are the directions the run was trained in: a source's code is placed as the run's
    multilingual tokenizer places it (its src_lang given, else the one all directions share), and
    `language_defaults` gives generation the target language all directions share.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        source_template: str = "{source}",
        padding_side: str = "right",
        max_length: int | None = None,
        languages: list[Direction] | None = None,
    ):
        if padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side must be left or right, got {padding_side!r}")
        self.tokenizer = tokenizer
        self.source_template = source_template
        self.padding_side = padding_side
        self.max_length = max_length  # inputs are cut to it, as training cut its sources
        self.languages = list(languages or [])

    @classmethod
    def for_text(cls, text: TextFormat, tokenizer: Tokenizer, max_length: int | None = None) -> "RunTokenizer":
        """The run's text encoding: its source template, its padding side, its languages, and inputs cut to
        `max_length` tokens (default: the length its training cut them to)."""
        return cls(tokenizer, text.source_template, text.padding_side, max_length or text.source_length, text.languages)

    def __call__(
        self,
        texts: list[str],
        return_tensors: str = "pt",
        padding: bool = True,
        truncation: bool = True,
        max_length: int | None = None,
        src_lang: str | None = None,
    ) -> dict[str, torch.Tensor]:
        code = self.language("src_lang", src_lang)
        start, end = code_placement(self.multilingual("src_lang"), code) if code is not None else ([], [])
        rows = self.tokenizer.encode([self.source_template.format(source=t) for t in texts])
        limit = (max_length or self.max_length) if truncation else None
        if limit is not None:
            rows = [row[: max(limit - len(start) - len(end), 0)] for row in rows]
        if any(not row for row in rows):
            raise DataError("an input is empty after tokenization; give each input some text")
        return padded([[*start, *row, *end] for row in rows], self.tokenizer.pad_id, self.padding_side)

    def language(self, option: str, asked: str | None) -> str | None:
        """The `option` (src_lang or tgt_lang) code to use: `asked`, else the one every direction the run was
        trained in shares (None for a run without codes); one sentence where the directions differ in it."""
        if asked is not None:
            return asked
        codes = {getattr(direction, option) for direction in self.languages}
        if len(codes) > 1:
            trained = ", ".join(map(str, self.languages))
            raise ConfigError(
                f"this run was trained in {len(self.languages)} directions ({trained}): choose one with src_lang and "
                "tgt_lang"
            )
        return codes.pop() if codes else None

    def language_defaults(self, options: dict) -> dict:
        """The tgt_lang generation writes in where `options` give none: the one the run's directions share."""
        code = self.language("tgt_lang", options.get("tgt_lang"))
        return {"tgt_lang": code} if code is not None else {}

    def multilingual(self, option: str):
        """The run's Hugging Face tokenizer with language codes, else one sentence naming `option`."""
        hf = getattr(self.tokenizer, "hf", None)
        if not code_tokens(hf):
            raise ConfigError(
                f"{option} needs a run whose tokenizer has language codes (one fine-tuned from an NLLB, M2M100 or "
                f"mBART directory); this run's {self.tokenizer.kind} tokenizer has none"
            )
        return hf

    @staticmethod
    def padding_side_for(model: nn.Module) -> str:
        """Left for a causal family, whose prompts continue at their last column; right for the others."""
        return "left" if isinstance(model, PromptedLM) else "right"

    @staticmethod
    def padding_side_of(cfg: ModelConfig) -> str:
        """`padding_side_for` the model `cfg` builds, without building it."""
        return "left" if issubclass(FAMILY_CLASSES[cfg.family], PromptedLM) else "right"

    def batch_decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> list[str]:
        return self.tokenizer.decode(ids.tolist(), skip_special=skip_special_tokens)

    def decode(self, ids: torch.Tensor | list[int], skip_special_tokens: bool = True) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.tokenizer.decode([ids], skip_special=skip_special_tokens)[0]
