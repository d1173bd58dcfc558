"""The run config's sections that say what a run reads and how it makes examples of it: the tokenizer, the
data (a corpus, or a mixture of corpora each with its own data section) and the objective. The run config
(run_config.py) holds them beside the optimizer, schedule, training, evaluation and output sections."""

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Literal

from encdec.data.datasets_corpus import SPLIT_SAYS, is_split
from encdec.data.formats import FORMATS, ReaderOptions, options_set, reader_options
from encdec.data.objectives import OBJECTIVES
from encdec.data.objectives.causal_lm import WINDOW_MODES
from encdec.data.objectives.mixture import MAX_MEMBERS
from encdec.data.objectives.transcribe import TASKS, SpecAugment, Timestamps
from encdec.errors import ConfigError
from encdec.generation.config import LanguageCode
from encdec.runs.text import MAX_LENGTH, TextObjective
from encdec.schema import Length, Positive, Range, Satisfies, short
from encdec.tokenizers import KINDS as TOKENIZER_KINDS
from encdec.tokenizers.base import MAX_SENTINELS, MAX_VOCAB

DATA_FORMATS = tuple(FORMATS)
MAX_STREAM_BLOCK = 10_000_000
Length_ = Annotated[int, Range(1, MAX_LENGTH)]


@dataclass
class TokenizerSection:
    kind: Literal[TOKENIZER_KINDS] = "byte"  # byte | sentencepiece | hf | bpe | unigram | tiktoken
    path: str | None = None  # the .model / tokenizer.json file
    vocab_size: Annotated[int, Range(1, MAX_VOCAB)] = 8192  # for bpe / unigram trained on the training corpus
    num_sentinels: Annotated[int, Range(0, MAX_SENTINELS)] = 100
    extra_specials: list[str] = field(default_factory=list)


Split = Annotated[str, Satisfies(is_split, SPLIT_SAYS)]


@dataclass
class DataSection(ReaderOptions):
    """A corpus and how it is read: the reader options (text_field, source_field, ...) are ReaderOptions',
    declared with the format table (encdec.data.formats); one the format does not take is refused."""

    format: Literal[DATA_FORMATS] = "tinystories"  # tinystories | text | instruct | jsonl | ... | datasets
    train: list[str] = field(default_factory=list)  # files; parallel: [source, target]
    validation: list[str] = field(default_factory=list)  # empty: split val_fraction off train
    val_fraction: Annotated[float, Range(0, 1, above=True, below=True)] = 0.05
    hub_name: str | None = None  # used when the train files are absent, e.g. roneneldan/TinyStories
    dataset: str | None = None  # format datasets: a Hub id[@revision], a local dataset directory, or json|csv|...
    dataset_config: str | None = None  # format datasets: the dataset's configuration (datasets' `name`)
    train_split: Split = "train"  # format datasets: the split to train on ("train[:90%]" slices it)
    validation_split: Split | None = None  # format datasets: None splits val_fraction off train_split
    streaming: bool = False  # read the corpus as training needs it, stream_block items at a time, never all
    stream_block: Annotated[int, Range(1, MAX_STREAM_BLOCK)] = 10_000  # items held, tokenized and shuffled at once
    max_documents: Positive | None = None  # read at most this many (in memory; the hub streams them)
    shards: str | None = None  # a directory for token shards, prepared once and memory-mapped; None: in memory
    mixture: "list[MixtureMember]" = field(default_factory=list)  # corpora sampled by weight, a batch each
    mixture_cap: Positive | None = None  # members without a weight: examples-proportional, each count capped
    src_lang: LanguageCode | None = None  # seq2seq: the sources' language, its code placed as the tokenizer does
    tgt_lang: LanguageCode | None = None  # seq2seq: the targets' (NLLB's deu_Latn; a mixture member's own)

    def __post_init__(self):
        if self.streaming and self.shards is not None:
            raise ConfigError("data.streaming reads the corpus as it trains; data.shards prepares it whole: choose one")
        sliced = [s for s in (self.train_split, self.validation_split) if s is not None and "[" in s]
        if self.streaming and sliced:
            raise ConfigError(f"data.streaming reads whole splits (datasets slices no stream); {sliced[0]} slices one")
        reader_options(self.format, options_set(self), key=lambda name: f"data.{name}")
        check_mixture(self)


@dataclass
class MixtureMember:
    """One corpus of a mixture: its own data section, its weight, and the objective keys it changes."""

    name: Annotated[str, Satisfies(lambda v: isinstance(v, str) and v.isidentifier(), "a name (letters, digits, _)")]
    data: DataSection
    weight: Annotated[float, Range(0, 1e6, above=True)] | None = None  # None: in proportion to its examples
    objective: dict = field(default_factory=dict)  # e.g. {kind: seq2seq, source_template: "summarize: {source}"}


@dataclass
class ObjectiveSection(TextObjective):
    """The objective: TextObjective's keys (seq_len, max_source_len, source_template, target_template,
    mode_tokens: what a checkpoint's text format follows from), its kind, and the rest of how examples are made."""

    kind: Literal[OBJECTIVES] = "ul2"  # causal_lm | span_corruption | ul2 | prefix_lm | seq2seq | transcribe
    windows: Literal[WINDOW_MODES] = "random"  # causal LM: random (yif-AI) or sequential
    max_target_len: Length_ = 128
    noise_density: Annotated[float, Range(0, 1, above=True, below=True)] = 0.15
    mean_span: Annotated[float, Range(1, MAX_LENGTH)] = 3.0
    ul2_probabilities: Annotated[list[float], Length(3, "non-negative numbers (R, X, S)", each=Range(0, 1e6))] = field(
        default_factory=lambda: [0.25, 0.25, 0.5]
    )  # R, X, S: their sum must be positive
    pack: bool = False  # several examples per row, attending within their own (seq2seq, span_corruption, ul2)
    language: LanguageCode | None = None  # transcribe: Whisper's language token in each prompt (en: <|en|>)
    task: Literal[TASKS] = "transcribe"  # transcribe: Whisper's task token (translate: into English)
    spec_augment: SpecAugment | None = None  # transcribe: masks over each recording's features (Park et al. 2019)
    timestamps: Timestamps | None = None  # transcribe: several recordings a row, Whisper's timestamp tokens


def check_mixture(data: DataSection) -> None:
    """A mixture names its corpora in its members alone: unique names, no mixture inside a member, and
    weights given to all members or to none (then data.mixture_cap may bound each member's count)."""
    members = data.mixture
    if not members:
        if data.mixture_cap is not None:
            raise ConfigError("data.mixture_cap caps the members of data.mixture, which is empty")
        return
    if len(members) > MAX_MEMBERS:
        raise ConfigError(f"data.mixture has {len(members):,} members; at most {MAX_MEMBERS:,} are mixed")
    beside = [key for key in corpus_keys_set(data) if key not in ("mixture", "mixture_cap")]
    if beside:  # each member reads its corpus by its own data section: one beside the mixture would do nothing
        raise ConfigError(
            f"with data.mixture the members name the corpora and how each is read: set data.{beside[0]} in "
            "the data section of each member it applies to, not beside the mixture"
        )
    names = [m.name for m in members]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"data.mixture names {short(twice[0])} twice; each member needs a name of its own")
    if any(m.data.mixture for m in members):
        raise ConfigError("a data.mixture member cannot hold a mixture of its own")
    weighted = [m.weight is not None for m in members]
    if any(weighted) and not all(weighted):
        raise ConfigError("give every data.mixture member a weight, or none (then each weighs its example count)")
    if all(weighted) and data.mixture_cap is not None:
        raise ConfigError("data.mixture_cap caps example counts, which weigh members only when no weight is given")


def corpus_keys_set(data: DataSection) -> list[str]:
    """The keys of a data section that hold other than their defaults."""
    defaults = {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(data)
    }
    return [key for key, default in defaults.items() if getattr(data, key) != default]
