"""From the run config to a tokenizer and the train / evaluation objectives.

data files (or the hub dataset when they are absent) -> texts or pairs
-> deterministic train / validation split -> tokenizer (built, trained, or
restored from a checkpoint) -> token documents -> the configured objective
"""

import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from encdec.data.corpora import PAIR_FORMATS, read_corpus, split_items
from encdec.data.documents import Documents, token_dtype
from encdec.data.hub import iter_hub_instruct_pairs, iter_hub_stories, load_hub_dataset
from encdec.data.objectives import PairTemplate, build_objective, tokenize_pairs
from encdec.data.objectives.base import Objective
from encdec.data.shards import prepare_shards, read_shards
from encdec.errors import ConfigError, DataError
from encdec.runs.config import ObjectiveSection, RunConfig
from encdec.tokenizers import UL2_MODE_TOKENS, Tokenizer, build_tokenizer, load_tokenizer

log = logging.getLogger(__name__)
T = TypeVar("T")

EVAL_SEED_OFFSET = 1_000_003  # evaluation draws from generators of their own


@dataclass
class RunData:
    tokenizer: Tokenizer
    train: Objective
    eval_objective: Callable[[str], Objective]  # "train" or "val" -> a freshly seeded objective


def build_run_data(cfg: RunConfig, run_dir: Path, tokenizer_dir: Path | None = None) -> RunData:
    pairs = cfg.data.format in PAIR_FORMATS
    if pairs != (cfg.objective.kind == "seq2seq"):
        raise ConfigError(
            f"objective {cfg.objective.kind} does not fit data.format {cfg.data.format}: "
            "seq2seq takes pairs (instruct, jsonl-pairs, tsv, parallel), the others take texts"
        )
    template = PairTemplate(cfg.objective.source_template, cfg.objective.target_template)
    use_shards = cfg.data.shards is not None and local_files_present(cfg)
    items = None if use_shards and (tokenizer_dir or cfg.tokenizer.kind not in ("bpe", "unigram")) else read_items(cfg)
    tokenizer = (
        load_tokenizer(tokenizer_dir) if tokenizer_dir else build_run_tokenizer(cfg, items[0] if items else [], pairs)
    )
    if use_shards:
        splits = sharded_splits(cfg, tokenizer, template, pairs)
    elif pairs:
        splits = {split: tokenize_pairs(tokenizer, part, template) for split, part in zip(("train", "val"), items)}
    else:
        splits = {split: tokenize_documents(tokenizer, part) for split, part in zip(("train", "val"), items)}
    seed, o = cfg.training.seed, cfg.objective

    def make(split: str, offset: int = 0) -> Objective:
        return build_objective(
            o.kind, splits[split], tokenizer, cfg.training.batch_size, seed + offset, **objective_options(o)
        )

    train = make("train")
    check_batch_size(train, cfg.training.batch_size)
    return RunData(tokenizer, train, lambda split: make(split, EVAL_SEED_OFFSET))


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
    """(train, validation) texts or pairs from the data files, or from the hub when they are absent."""
    d = cfg.data
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


def read_options(cfg: RunConfig) -> dict:
    d = cfg.data
    if d.format == "jsonl":
        return {"text_field": d.text_field}
    if d.format == "jsonl-pairs":
        fields = ("source_field", "target_field", "source_list", "target_list", "list_separator")
        return {name: getattr(d, name) for name in fields}
    return {}


def read_hub(cfg: RunConfig) -> tuple[list, list]:
    d = cfg.data
    reader = iter_hub_instruct_pairs if d.format == "instruct" else iter_hub_stories
    streaming = d.max_documents is not None  # read only the first documents instead of downloading all
    train = list(limit(reader(load_hub_dataset(d.hub_name, split="train", streaming=streaming)), d.max_documents))
    val = list(limit(reader(load_hub_dataset(d.hub_name, split="validation", streaming=streaming)), d.max_documents))
    return train, val


def limit(items: Iterable[T], n: int | None) -> Iterator[T]:
    for i, item in enumerate(items):
        if n is not None and i >= n:
            return
        yield item


def build_run_tokenizer(cfg: RunConfig, train_items: list, pairs: bool) -> Tokenizer:
    t = cfg.tokenizer
    extra = list(t.extra_specials)
    if cfg.objective.mode_tokens:
        extra += [m for m in UL2_MODE_TOKENS if m not in extra]
    options = {"num_sentinels": t.num_sentinels, "extra_specials": tuple(extra)}
    if t.kind in ("bpe", "unigram"):
        texts = (text for item in train_items for text in (item if pairs else (item,)))
        return build_tokenizer(t.kind, texts=texts, vocab_size=t.vocab_size, **options)
    if t.kind in ("sentencepiece", "hf") and t.path and not Path(t.path).is_file():
        raise DataError(f"tokenizer file {t.path} does not exist")
    return build_tokenizer(t.kind, t.path, **options)


def tokenize_documents(tokenizer: Tokenizer, texts: list[str]) -> Documents:
    if not texts:
        raise DataError("the corpus split is empty: no documents to train or validate on")
    dtype = token_dtype(tokenizer.vocab_size)
    return Documents.from_lists(tokenizer.encode(texts, add_eos=True), dtype)  # EOS closes each document


def objective_options(o: ObjectiveSection) -> dict:
    """The objective section's settings as `build_objective`'s keyword arguments: its keyword-only
    parameters, each of which the section holds under the same name."""
    parameters = inspect.signature(build_objective).parameters.values()
    return {p.name: getattr(o, p.name) for p in parameters if p.kind is p.KEYWORD_ONLY}
