"""From the run config to a tokenizer and the train / evaluation objectives.

data files, a `datasets` dataset (or the hub dataset when the files are absent) -> texts or pairs
-> deterministic train / validation split -> tokenizer (built, trained, or restored from a
checkpoint) -> token documents -> the configured objective

With data.streaming the items are never all read: each split is a stream the objective reads a
block at a time (data.objectives.stream). With data.mixture each member is read so, with its own
objective section, and a mixture objective draws a member per step (data.objectives.mixture).
"""

import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TypeVar

from encdec.data.corpora import crossing, is_validation, item_key, split_hash, split_items, with_text
from encdec.data.datasets_corpus import BUILDERS, dataset_items, open_dataset
from encdec.data.documents import Documents, token_dtype
from encdec.data.formats import FORMATS, PAIR_FORMATS, SPEECH_FORMATS, read_corpus
from encdec.data.hub import (
    INSTRUCT_TEXT_FORMATS,
    iter_hub_instruct_pairs,
    iter_hub_instruct_texts,
    iter_hub_stories,
    load_hub_dataset,
)
from encdec.data.objectives import PAIRED, PairTemplate, build_objective, tokenize_pairs
from encdec.data.objectives.mixture import MixtureObjective, proportional_weights
from encdec.data.objectives.objective import Objective
from encdec.data.objectives.seq2seq import pair_ends
from encdec.data.objectives.stream import StreamObjective
from encdec.data.objectives.transcribe import (
    NO_TIMESTAMPS,
    PREVIOUS,
    SMOOTHING_ON_TIMESTAMPS,
    smoothing_on_timestamps,
    tokenize_transcripts,
    transcription_prompt,
)
from encdec.data.shards import prepare_shards, read_shards
from encdec.errors import ConfigError, DataError
from encdec.tokenizers import UL2_MODE_TOKENS, Tokenizer, build_tokenizer, load_tokenizer
from encdec.training.data_sections import DataSection, ObjectiveSection
from encdec.training.run_config import RunConfig, member_objective

log = logging.getLogger(__name__)
T = TypeVar("T")

EVAL_SEED_OFFSET = 1_000_003  # evaluation draws from generators of their own
MEMBER_SEED_OFFSET = 7_919  # mixture member i draws from seed + i * MEMBER_SEED_OFFSET


@dataclass
class RunData:
    tokenizer: Tokenizer
    train: Objective
    eval_objective: Callable[[str], Objective]  # "train" or "val" -> a freshly seeded objective
    member_eval: dict[str, Callable[[str], Objective]] = field(default_factory=dict)  # a mixture's, by name


@dataclass
class Corpus:
    """One data section with its objective section, read: items in memory, or streams opened on demand."""

    data: DataSection
    objective: ObjectiveSection
    items: tuple[list, list] | None = None  # (train, validation) in memory
    streams: dict[str, Callable[[], Iterator]] | None = None  # "train" / "val" -> opens that split's stream
    shards: bool = False  # tokens prepared in data.shards, read there once the tokenizer exists

    @property
    def pairs(self) -> bool:
        return self.objective.kind in PAIRED

    def tokenizer_texts(self) -> Iterator[str]:
        """The training texts a bpe / unigram tokenizer learns from (a stream's first block): a speech corpus's
        transcripts alone."""
        train = self.items[0] if self.items else list(islice(self.streams["train"](), self.data.stream_block))
        texts = slice(1, 2) if self.objective.kind == "transcribe" else slice(None)
        return (text for item in train for text in (item[texts] if self.pairs else (item,)))

    def size(self) -> int:
        """Training items, for examples-proportional mixing; a stream's is unknown until it is read."""
        if self.items is None:
            raise ConfigError(
                "a data.mixture member that streams (or reads shards) has no example count to weigh it by; "
                "give every member a weight"
            )
        return len(self.items[0])


def build_run_data(cfg: RunConfig, run_dir: Path, tokenizer_dir: Path | None = None) -> RunData:
    trained_tokenizer = tokenizer_dir is None and cfg.tokenizer.kind in ("bpe", "unigram")
    if not cfg.data.mixture:
        corpus = read_section(cfg, cfg.data, cfg.objective, need_items=trained_tokenizer)
        tokenizer = run_tokenizer(cfg, [corpus], tokenizer_dir)
        train, evaluate = corpus_objectives(cfg, corpus, tokenizer, cfg.training.seed)
        check_batch_size(train, cfg.training.batch_size)
        return RunData(tokenizer, train, evaluate)
    corpora = [
        read_section(cfg, m.data, member_objective(cfg, i), need_items=trained_tokenizer)
        for i, m in enumerate(cfg.data.mixture)
    ]
    tokenizer = run_tokenizer(cfg, corpora, tokenizer_dir)
    members = [
        corpus_objectives(cfg, c, tokenizer, cfg.training.seed + (i + 1) * MEMBER_SEED_OFFSET)
        for i, c in enumerate(corpora)
    ]
    weights = [m.weight for m in cfg.data.mixture]
    if weights[0] is None:
        weights = proportional_weights([c.size() for c in corpora], cfg.data.mixture_cap)
    seed = cfg.training.seed

    def mixture(split: str, offset: int = 0) -> Objective:
        return MixtureObjective([evaluate(split) for _, evaluate in members], weights, seed + offset)

    train = MixtureObjective([train for train, _ in members], weights, seed)
    names = [m.name for m in cfg.data.mixture]
    return RunData(
        tokenizer, train, lambda split: mixture(split, EVAL_SEED_OFFSET), dict(zip(names, (e for _, e in members)))
    )


def read_section(cfg: RunConfig, d: DataSection, o: ObjectiveSection, need_items: bool) -> Corpus:
    """The corpus of one data section: its items read, its streams prepared, or its shards' inputs named."""
    speech = o.kind == "transcribe"
    entry = FORMATS[d.format]
    if entry.pairs not in (None, o.kind in PAIRED) or (entry.pairs and entry.audio != speech):
        raise ConfigError(
            f"objective {o.kind} does not fit data.format {d.format}: seq2seq takes text pairs "
            f"({', '.join(PAIR_FORMATS)}, datasets), transcribe recordings and their transcripts "
            f"({', '.join(SPEECH_FORMATS)}, datasets), the others take texts"
        )
    if speech and d.shards is not None:
        raise ConfigError("data.shards holds token ids; objective transcribe reads recordings: drop data.shards")
    view = dataclasses.replace(cfg, data=d, objective=o) if (d, o) != (cfg.data, cfg.objective) else cfg
    if d.streaming:
        return Corpus(d, o, streams={split: stream_opener(view, split) for split in ("train", "val")})
    if d.shards is not None and local_files_present(view):
        return Corpus(d, o, items=read_items(view) if need_items else None, shards=True)
    return Corpus(d, o, items=read_items(view))


def run_tokenizer(cfg: RunConfig, corpora: list[Corpus], tokenizer_dir: Path | None) -> Tokenizer:
    if tokenizer_dir:
        return load_tokenizer(tokenizer_dir)
    texts = (text for corpus in corpora for text in corpus.tokenizer_texts())
    return build_run_tokenizer(cfg, texts if cfg.tokenizer.kind in ("bpe", "unigram") else ())


def warn_of_smoothing(cfg: RunConfig, tokenizer: Tokenizer, no_timestamps_id: int) -> None:
    """One warning where training.label_smoothing keeps more than SMOOTHING_ON_TIMESTAMPS of each target's
    probability on the timestamp tokens (the tokenizer's ids after <|notimestamps|>), which Whisper's timestamp
    rule reads as asking for one (the logits at least the tokenizer's tokens, the model's vocab_size where it is
    set above them)."""
    timestamps = tokenizer.vocab_size - no_timestamps_id - 1
    smoothing, vocab = cfg.training.label_smoothing, max(cfg.model.config.vocab_size or 0, tokenizer.vocab_size)
    kept = smoothing_on_timestamps(smoothing, timestamps, vocab)
    if kept > SMOOTHING_ON_TIMESTAMPS:
        log.warning(
            "training.label_smoothing %g keeps %.3f of each target's probability on the %d timestamp tokens (%.0f%% "
            "of the vocabulary): Whisper's timestamp rule writes a timestamp wherever their sum beats the best text "
            "token, so long-form transcription may end windows early; train the last steps with "
            "training.label_smoothing=0 (docs/transcribe.md)",
            smoothing,
            kept,
            timestamps,
            100 * timestamps / vocab,
        )


def corpus_objectives(
    cfg: RunConfig, corpus: Corpus, tokenizer: Tokenizer, seed: int
) -> tuple[Objective, Callable[[str], Objective]]:
    """(the training objective, split -> a freshly seeded evaluation objective) over one corpus."""
    o, batch_size = corpus.objective, cfg.training.batch_size
    template = PairTemplate(o.source_template, o.target_template)

    budget = cfg.training.batch_tokens
    if o.kind == "seq2seq":
        made = {"ends": pair_ends(tokenizer, corpus.data.src_lang, corpus.data.tgt_lang)}
    elif o.kind == "transcribe":
        start, prompt = transcription_prompt(tokenizer, o.language, o.task)
        audio = cfg.model.config.audio  # the model section as built (a fine-tuning run's: on the pretrained's)
        made = {
            "prompt": prompt,
            "decoder_start": start,
            "n_mels": audio.n_mels,
            "frames": 2 * audio.max_source_positions,
            "no_timestamps_id": tokenizer.special_id(NO_TIMESTAMPS),
            "previous_id": tokenizer.special_id(PREVIOUS),
        }
        if o.timestamps is not None and made["no_timestamps_id"] is not None:
            warn_of_smoothing(cfg, tokenizer, made["no_timestamps_id"])
    else:
        made = {}

    def build(data, objective_seed: int) -> Objective:
        options = objective_options(o) | {"batch_tokens": budget} | made
        return build_objective(o.kind, data, tokenizer, batch_size, objective_seed, **options)

    if corpus.streams is not None:
        evaluation_items = min(corpus.data.stream_block, cfg.evaluation.steps * batch_size)

        def streamed(split: str, objective_seed: int, block: int) -> Objective:
            def make(items: list, block_seed: int) -> Objective:
                return build(tokenize(tokenizer, items, template, o.kind), block_seed)

            what = f"the {split} split of data.{corpus.data.dataset or corpus.data.train or corpus.data.hub_name}"
            name = f"stream_{o.kind}"
            return StreamObjective(corpus.streams[split], make, block, objective_seed, name, what)

        train = streamed("train", seed, corpus.data.stream_block)
        return train, lambda split: streamed(split, seed + EVAL_SEED_OFFSET, evaluation_items)
    if corpus.shards:
        view = dataclasses.replace(cfg, data=corpus.data, objective=o)
        splits = sharded_splits(view, tokenizer, template, corpus.pairs)  # text alone: read_section says so
    else:
        splits = {
            split: tokenize(tokenizer, part, template, o.kind) for split, part in zip(("train", "val"), corpus.items)
        }
    return build(splits["train"], seed), lambda split: build(splits[split], seed + EVAL_SEED_OFFSET)


def generation_view(cfg: RunConfig) -> RunConfig:
    """The config generated samples are drawn and formatted by: the run's, or its first mixture member's
    (that member's data and objective, its template with them)."""
    if not cfg.data.mixture:
        return cfg
    return dataclasses.replace(cfg, data=cfg.data.mixture[0].data, objective=member_objective(cfg, 0))


def validation_items(cfg: RunConfig, n: int) -> list:
    """The first `n` validation items (texts or pairs) of `cfg`'s corpus; a stream is read only that far."""
    if cfg.data.streaming:
        return list(islice(stream_opener(cfg, "val")(), n))
    return read_items(cfg)[1][:n]


def tokenize(tokenizer: Tokenizer, items: list, template: PairTemplate, kind: str):
    """Items as objective `kind` takes them: (sources, targets) ids, (recordings, transcript ids) or documents."""
    if kind == "transcribe":
        return tokenize_transcripts(tokenizer, items)
    return tokenize_pairs(tokenizer, items, template) if kind == "seq2seq" else tokenize_documents(tokenizer, items)


def check_batch_size(objective: Objective, batch_size: int) -> None:
    """Refuse a training.batch_size above the examples an epoch of `objective` holds, which every step would
    otherwise cut silently to one batch of them all (objectives that draw windows at random have no such cut)."""
    plan = getattr(objective, "plan", None)
    if plan is not None and batch_size > plan.num_examples:
        raise ConfigError(
            f"training.batch_size ({batch_size:,}) exceeds the {plan.num_examples:,} training examples the data "
            f"makes, so every batch would hold only those; lower it to {plan.num_examples:,} or give more data"
        )


def local_files_present(cfg: RunConfig) -> bool:
    return bool(cfg.data.train) and all(Path(p).is_file() for p in cfg.data.train + cfg.data.validation)


def sharded_splits(cfg: RunConfig, tokenizer: Tokenizer, template: PairTemplate, pairs: bool) -> dict:
    """Token shards in `data.shards` (prepared once, reused while the inputs are unchanged), memory-mapped."""
    d, root = cfg.data, Path(cfg.data.shards)
    common = {"template": template, "reader_options": read_options(cfg), "progress": False}
    prepare_shards(
        root / "train", tokenizer, d.format, d.train, val_fraction=0.0 if d.validation else d.val_fraction, **common
    )
    train = read_shards(root / "train", "train").fields
    if d.validation:
        prepare_shards(root / "validation", tokenizer, d.format, d.validation, **common)
        val = read_shards(root / "validation", "train").fields
    else:
        val = read_shards(root / "train", "validation").fields
    if pairs:
        return {"train": (train["source"], train["target"]), "val": (val["source"], val["target"])}
    return {"train": train["text"], "val": val["text"]}


def read_items(cfg: RunConfig) -> tuple[list, list]:
    """(train, validation) texts or pairs from the data files or a `datasets` dataset, or from the hub
    when the files are absent."""
    d = cfg.data
    if d.format == "datasets":
        train = limit(dataset_split(cfg, "train"), d.max_documents)
        if d.validation_split or d.validation:
            return list(train), list(dataset_split(cfg, "val"))
        return split_items(train, d.val_fraction, seed=0)
    missing = [path for path in d.train if not Path(path).exists()]  # a FIFO or a directory: the reader says so
    if not d.train or missing:
        if not d.hub_name:
            raise DataError(f"data file {missing[0] if missing else '(none given)'} does not exist; set data.train")
        if missing:  # files named but absent: say where the data comes from instead (none named: as asked)
            log.warning("local data %s absent: loading %s from the Hugging Face hub", missing, d.hub_name)
        return read_hub(cfg)
    options = read_options(cfg)
    train = limit(read_corpus(d.format, d.train, **options), d.max_documents)
    if d.validation:
        return list(train), list(read_corpus(d.format, d.validation, **options))
    return split_items(train, d.val_fraction, seed=0)


def dataset_split(cfg: RunConfig, split: str, streaming: bool = False) -> Iterator:
    """The items of the "train" or "val" split of a `datasets` corpus (data.format datasets)."""
    d = cfg.data
    name = d.train_split if split == "train" else d.validation_split or "validation"
    files = d.train if split == "train" else d.validation
    if files and d.dataset is not None and d.dataset not in BUILDERS:
        raise ConfigError(
            f"data.dataset {d.dataset} names a dataset; data.train and validation name files for a builder"
        )
    rows = open_dataset(d.dataset, name, files, d.dataset_config, streaming)
    where = f"dataset {d.dataset or files[0]} split {name}"
    kind = cfg.objective.kind
    items = dataset_items(rows, where, kind in PAIRED, recordings=kind == "transcribe", **read_options(cfg))
    return with_text(items, where)


def stream_opener(cfg: RunConfig, split: str) -> Callable[[], Iterator]:
    """A function that opens the "train" or "val" split as a stream of items, from its first on each call:
    a split of its own, or the items of the training split that hash to it (as split_items splits; the side a
    hash split leaves empty gets its crossing item only where data.max_documents bounds the stream)."""
    d = cfg.data
    hub = d.format != "datasets" and (not d.train or not all(Path(p).exists() for p in d.train)) and d.hub_name

    def read(which: str) -> Iterator:
        if d.format == "datasets":
            return dataset_split(cfg, which, streaming=True)
        if hub:
            return hub_items(d, "train" if which == "train" else "validation", streaming=True)
        if not d.train:
            raise DataError("data.streaming has no data file to read; set data.train")
        return read_corpus(d.format, d.train if which == "train" else d.validation, **read_options(cfg))

    if hub or d.validation or (d.format == "datasets" and d.validation_split):
        return lambda: limit(read(split), d.max_documents)

    crossed: list[int | None] = []  # split_items' crossing item, found once

    def hashed() -> Iterator:
        if not crossed:  # data.max_documents bounds the stream: a first pass over its hashes finds the crossing
            bounded = d.max_documents is not None
            hashes = [split_hash(item_key(item)) for item in limit(read("train"), d.max_documents)] if bounded else []
            crossed.append(crossing(hashes, d.val_fraction))
        for i, item in enumerate(limit(read("train"), d.max_documents)):
            if (is_validation(item_key(item), d.val_fraction) != (i == crossed[0])) == (split == "val"):
                yield item

    return hashed


def read_options(cfg: RunConfig) -> dict:
    """The reader options data.format takes (encdec.data.formats), as the data section holds them."""
    return {name: getattr(cfg.data, name) for name in FORMATS[cfg.data.format].options}


def read_hub(cfg: RunConfig) -> tuple[list, list]:
    d = cfg.data
    streaming = d.max_documents is not None  # read only the first documents instead of downloading all
    train = list(limit(hub_items(d, "train", streaming), d.max_documents))
    val = list(limit(hub_items(d, "validation", streaming), d.max_documents))
    return train, val


def hub_items(d: DataSection, split: str, streaming: bool) -> Iterator:
    """The items of split `split` of the hub dataset data.hub_name as data.format reads them: Instruct
    line rows regrouped into records (pairs, stories or whole records, as from a local file), else a row each."""
    rows = load_hub_dataset(d.hub_name, split=split, streaming=streaming)
    where = f"dataset {d.hub_name} split {split}"
    if d.format == "instruct":
        return iter_hub_instruct_pairs(rows, where=where)
    if d.format in INSTRUCT_TEXT_FORMATS:
        return iter_hub_instruct_texts(rows, d.format, where=where)
    return iter_hub_stories(rows)


def limit(items: Iterable[T], n: int | None) -> Iterator[T]:
    for i, item in enumerate(items):
        if n is not None and i >= n:
            return
        yield item


def build_run_tokenizer(cfg: RunConfig, texts: Iterable[str]) -> Tokenizer:
    """The run's tokenizer: built, or trained (bpe / unigram) on `texts`."""
    t = cfg.tokenizer
    extra = list(t.extra_specials)
    objectives = [cfg.objective] + [member_objective(cfg, i) for i in range(len(cfg.data.mixture))]
    if any(o.mode_tokens for o in objectives):
        extra += [m for m in UL2_MODE_TOKENS if m not in extra]
    options = {"num_sentinels": t.num_sentinels, "extra_specials": tuple(extra)}
    if t.kind in ("bpe", "unigram"):
        return build_tokenizer(t.kind, texts=texts, vocab_size=t.vocab_size, **options)
    path = t.path
    if t.kind == "hf" and path and Path(path).is_dir() and (Path(path) / "tokenizer.json").is_file():
        path = str(Path(path) / "tokenizer.json")  # a Hugging Face directory: its tokenizer.json
    if t.kind in ("sentencepiece", "hf") and path and not Path(path).is_file():
        wanted = "a .model file" if t.kind == "sentencepiece" else "a tokenizer.json file or a directory holding one"
        what = "is a directory without one" if Path(path).is_dir() else "does not exist"
        raise DataError(f"tokenizer.path {path} {what}; tokenizer.kind {t.kind} reads {wanted}")
    return build_tokenizer(t.kind, path, **options)


def tokenize_documents(tokenizer: Tokenizer, texts: list[str]) -> Documents:
    if not texts:
        raise DataError("the corpus split is empty: no documents to train or validate on")
    dtype = token_dtype(tokenizer.vocab_size)
    return Documents.from_lists(tokenizer.encode(texts, add_eos=True), dtype)  # EOS closes each document


def objective_options(o: ObjectiveSection) -> dict:
    """The objective section's settings as `build_objective`'s keyword arguments: its keyword-only
    parameters, each of which the section holds under the same name."""
    parameters = inspect.signature(build_objective).parameters.values()
    return {p.name: getattr(o, p.name) for p in parameters if p.kind is p.KEYWORD_ONLY and hasattr(o, p.name)}
