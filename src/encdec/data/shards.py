"""Tokenize a corpus once into shards on disk, and read them back as memory-mapped `Documents`.

Layout of a shard directory:

    manifest.json                 tokenizer, source files + SHA-256, options, counts
    tokenizer/                    the tokenizer, saved (load it with `ShardSet.tokenizer()`)
    {split}.{field}.bin           flat token ids, uint16 or uint32 by vocabulary size
    {split}.{field}.idx.npy       (D + 1,) int64 document offsets (the document boundaries)

Fields are `text` for language-model corpora, `source` and `target` for pairs.
Splits are `train` and, when `val_fraction` > 0, `validation` (a hash split, see
`corpora.is_validation`). Two worker processes tokenize batches of documents in
order while the parent writes; re-running with the same tokenizer, sources and
options finds the manifest and reuses the shards.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from encdec.data.corpora import PairTemplate, is_validation
from encdec.data.documents import Documents, token_dtype
from encdec.data.formats import PAIR_FORMATS, read_corpus
from encdec.data.reading import require_regular_file
from encdec.errors import ConfigError, DataError, listed
from encdec.safe_paths import (
    atomic_path,
    check_not_symlink,
    inside,
    new_file_beside,
    output_dir,
    plain_name,
    write_atomic,
)
from encdec.schema import Count, load_json, read, short
from encdec.tokenizers import Tokenizer, load_tokenizer

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
DTYPES = {"uint16": np.uint16, "uint32": np.uint32}
BAR_DELAY_S = 1.0  # seconds before the progress bar of a preparation shows


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def choose_dtype(vocab_size: int, dtype: str = "auto", where: str | Path = "") -> str:
    """The name of `token_dtype(vocab_size)` for `auto`; an explicit dtype too small for the ids is a DataError."""
    needed = token_dtype(vocab_size)
    if dtype == "auto":
        return needed.__name__
    if dtype not in DTYPES:
        raise DataError(f"shard dtype {dtype!r} is unknown; choose auto, uint16 or uint32")
    if np.dtype(DTYPES[dtype]).itemsize < np.dtype(needed).itemsize:
        raise DataError(f"the tokenizer's {vocab_size} ids do not fit {dtype} shards in {where}; use uint32 or auto")
    return dtype


# --- workers: each loads the saved tokenizer once, then encodes batches ---

_worker_tokenizer: Tokenizer | None = None


def _init_worker(tokenizer_dir: str) -> None:
    global _worker_tokenizer
    _worker_tokenizer = load_tokenizer(tokenizer_dir)


Packed = dict[bool, list[tuple[np.ndarray, np.ndarray]]]  # is_validation -> per field (flat ids, lengths)


def _encode_batch(job: tuple[list[bool], list[tuple[str, ...]], dict]) -> tuple[int, Packed]:
    flags, rows, options = job
    return len(flags), _encode_fields(_worker_tokenizer, flags, rows, options)


def _encode_fields(tokenizer: Tokenizer, flags: list[bool], rows: list[tuple[str, ...]], options: dict) -> Packed:
    """Ids of each row packed per split and field as (flat ids, lengths): small to send between processes.

    Text fields get BOS/EOS as configured; pair fields get none (the objective adds EOS).
    """
    if len(rows[0]) == 1:
        encoded = [tokenizer.encode([r[0] for r in rows], add_eos=options["add_eos"], add_bos=options["add_bos"])]
    else:
        encoded = [tokenizer.encode([r[i] for r in rows]) for i in range(len(rows[0]))]
    packed: Packed = {}
    for wanted in (False, True):
        chosen = [i for i, flag in enumerate(flags) if flag == wanted]
        if chosen:
            packed[wanted] = [
                (
                    np.fromiter(itertools.chain.from_iterable(docs[i] for i in chosen), dtype=options["dtype"]),
                    np.array([len(docs[i]) for i in chosen], dtype=np.int64),
                )
                for docs in encoded
            ]
    return packed


@dataclass
class _FieldWriter:
    """Appends documents of one (split, field) to its .bin and remembers the offsets."""

    path: Path
    dtype: np.dtype

    def __post_init__(self):
        self.tmp, fd = new_file_beside(self.path)  # a fresh name, renamed over: a link at the name is replaced
        self.handle = os.fdopen(fd, "wb")
        self.lengths: list[np.ndarray] = []

    def write(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        self.handle.write(flat.astype(self.dtype, copy=False).tobytes())
        self.lengths.append(lengths)

    def close(self) -> dict:
        self.handle.close()
        os.replace(self.tmp, self.path)
        lengths = np.concatenate([np.zeros(1, dtype=np.int64), *self.lengths])
        offsets = np.cumsum(lengths)  # (D + 1,)
        with atomic_path(self.path.with_name(self.path.name.replace(".bin", ".idx.npy"))) as tmp, open(tmp, "wb") as f:
            np.save(f, offsets)
        return {"documents": len(offsets) - 1, "tokens": int(offsets[-1])}


def _encode_in_workers(jobs: Iterator, workers: int, tokenizer_dir: Path) -> Iterator[tuple[int, Packed]]:
    """Encode jobs in `workers` processes, results in job order, at most 2 jobs per worker in flight.

    A worker that dies (or cannot load the tokenizer) ends the run with a DataError instead of a hang.
    """
    # fork on Linux: workers inherit the imported modules (importing `encdec` pulls in torch, seconds per
    # spawned worker); spawn elsewhere, where fork is unsafe or missing.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    context = multiprocessing.get_context(method)
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_worker, initargs=(str(tokenizer_dir),)
    ) as pool:
        pending: deque = deque()
        try:
            for job in jobs:
                pending.append(pool.submit(_encode_batch, job))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BrokenProcessPool:
            raise DataError(
                f"a tokenizer worker process died while preparing shards with {tokenizer_dir} "
                "(a script that calls prepare_shards with workers > 1 needs an `if __name__ == '__main__':` guard)"
            ) from None
        finally:
            for future in pending:
                future.cancel()


def _rows(format: str, paths: list[Path], template: PairTemplate, reader_options: dict) -> Iterator[tuple[str, ...]]:
    for item in read_corpus(format, paths, **reader_options):
        yield template.apply(*item) if format in PAIR_FORMATS else (item,)


def prepare_shards(
    out_dir: str | Path,
    tokenizer: Tokenizer,
    format: str,
    paths: list[str | Path],
    val_fraction: float = 0.0,
    seed: int = 0,
    add_bos: bool = False,
    add_eos: bool = True,
    template: PairTemplate = PairTemplate(),
    dtype: str = "auto",
    workers: int = 2,
    batch_documents: int = 256,
    progress: bool = True,
    reader_options: dict | None = None,
) -> Path:
    """Tokenize `paths` (read as `format`) into shards in `out_dir`; reuse them when nothing changed."""
    from tqdm.auto import tqdm

    out_dir, paths = Path(out_dir), [Path(p) for p in paths]
    for path in paths:
        require_regular_file(path)  # hashed below: a FIFO or /dev/zero would never end
    dtype = choose_dtype(tokenizer.vocab_size, dtype, out_dir)
    pairs = format in PAIR_FORMATS
    fields = ["source", "target"] if pairs else ["text"]
    options = {"add_bos": add_bos, "add_eos": add_eos and not pairs, "dtype": dtype}
    inputs = {
        "format": format,
        "reader_options": reader_options or {},
        "template": [template.source, template.target] if pairs else None,
        "val_fraction": val_fraction,
        "seed": seed,
        "dtype": dtype,
        **options,
        "tokenizer": {
            "kind": tokenizer.kind,
            "vocab_size": tokenizer.vocab_size,
            "fingerprint": tokenizer.fingerprint(),
        },
        "sources": [{"path": str(p.resolve()), "bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in paths],
    }
    existing = _read_manifest(out_dir) if (out_dir / MANIFEST).is_file() else None
    if existing is not None and existing.get("inputs") == inputs and _files_present(out_dir, existing):
        logger.info("reusing shards in %s (inputs unchanged)", out_dir)
        return out_dir

    splits = ["train", "validation"] if val_fraction > 0 else ["train"]
    check_not_symlink(out_dir / MANIFEST, out_dir / "tokenizer", error=DataError)
    for split, field, suffix in itertools.product(splits, fields, (".bin", ".bin.tmp", ".idx.npy")):
        _shard_file(out_dir, split, field, suffix)  # refuses a symlink: writing through it changes a file elsewhere
    output_dir(out_dir, "--out", DataError)
    (out_dir / MANIFEST).unlink(missing_ok=True)
    tokenizer_dir = tokenizer.save(out_dir / "tokenizer")
    writers = {(s, f): _FieldWriter(out_dir / f"{s}.{f}.bin", np.dtype(dtype)) for s in splits for f in fields}

    def jobs() -> Iterator[tuple[list[bool], list[tuple[str, ...]], dict]]:
        rows: list[tuple[str, ...]] = []
        for row in _rows(format, paths, template, reader_options or {}):
            rows.append(row)
            if len(rows) == batch_documents:
                yield [is_validation(r[0], val_fraction, seed) for r in rows], rows, options
                rows = []
        if rows:
            yield [is_validation(r[0], val_fraction, seed) for r in rows], rows, options

    # shown after a second: a file refused at its first lines (a bad column, no examples) is its sentence alone
    bar = tqdm(desc=f"tokenizing {out_dir.name}", unit=" docs", disable=not progress, delay=BAR_DELAY_S)
    if workers > 1:
        results = _encode_in_workers(jobs(), workers, tokenizer_dir)
    else:
        results = ((len(flags), _encode_fields(tokenizer, flags, rows, opts)) for flags, rows, opts in jobs())
    try:
        for count, packed in results:
            for wanted, per_field in packed.items():
                split = "validation" if wanted else "train"
                for field, (flat, lengths) in zip(fields, per_field, strict=True):
                    writers[split, field].write(flat, lengths)
            bar.update(count)
    finally:
        bar.close()
        results.close()
    counts = {s: {f: writers[s, f].close() for f in fields} for s in splits}
    manifest = {"version": FORMAT_VERSION, "fields": fields, "splits": counts, "inputs": inputs}
    write_atomic(out_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    logger.info("wrote shards to %s: %s", out_dir, counts)
    return out_dir


def _shard_file(directory: Path, split: object, field: object, suffix: str) -> Path:
    """`{split}.{field}{suffix}` in `directory`, for a split and field read from a manifest: plain names only."""
    split = plain_name(split, "shard split", directory, DataError)
    field = plain_name(field, "shard field", directory, DataError)
    return inside(directory, f"{split}.{field}{suffix}", "shard file", DataError)


@dataclass
class ShardManifest:
    """manifest.json of a shard directory, as `prepare_shards` writes it."""

    version: int
    fields: list[str]
    splits: dict[str, dict[str, dict[str, Count]]]  # documents and tokens of each split, field
    inputs: dict  # what the shards were made from (compared whole); its dtype is read

    def __post_init__(self):
        if self.version != FORMAT_VERSION:
            raise ConfigError(f"has version {self.version}; expected {FORMAT_VERSION}")
        if self.inputs.get("dtype") not in DTYPES:
            raise ConfigError(f"inputs.dtype must be one of {', '.join(DTYPES)}, got {short(self.inputs.get('dtype'))}")


def _read_manifest(directory: Path) -> dict:
    """The manifest's mapping, every key `read_shards` uses of the declared type; else one sentence."""
    path = inside(directory, MANIFEST, "shard manifest", DataError)
    if not path.is_file():
        raise DataError(f"shard directory {directory} has no {MANIFEST}; run `encdec data prepare` first")
    manifest = load_json(path, "shard manifest", DataError)
    try:
        read(ShardManifest, manifest)
    except ConfigError as error:
        raise DataError(f"shard manifest {path}: {error}"[:280]) from None
    return manifest


def _files_present(directory: Path, manifest: dict) -> bool:
    return all(
        _shard_file(directory, s, f, ".bin").is_file() and _shard_file(directory, s, f, ".idx.npy").is_file()
        for s in manifest["splits"]
        for f in manifest["fields"]
    )


@dataclass
class ShardSet:
    """The shards of one split: `fields["text"]` or `fields["source"]` / `fields["target"]` as Documents."""

    directory: Path
    split: str
    manifest: dict
    fields: dict[str, Documents]

    def tokenizer(self) -> Tokenizer:
        return load_tokenizer(inside(self.directory, "tokenizer", "shard tokenizer", DataError))


def read_shards(directory: str | Path, split: str = "train") -> ShardSet:
    """Memory-map the shards of `split` written by `prepare_shards`."""
    directory = Path(directory)
    manifest = _read_manifest(directory)
    if split not in manifest["splits"]:
        raise DataError(
            f"shard directory {directory} has no split {split!r}; it has {listed(list(manifest['splits']))}"
        )
    dtype = DTYPES[manifest["inputs"]["dtype"]]
    fields = {}
    for field in manifest["fields"]:
        offsets = _read_offsets(_shard_file(directory, split, field, ".idx.npy"))
        bin_path = _shard_file(directory, split, field, ".bin")
        expected = int(offsets[-1]) * np.dtype(dtype).itemsize
        if bin_path.stat().st_size != expected:
            raise DataError(f"shard {bin_path} has {bin_path.stat().st_size} bytes; its index expects {expected}")
        tokens = np.memmap(bin_path, dtype=dtype, mode="r") if expected else np.zeros(0, dtype=dtype)
        fields[field] = Documents(tokens, offsets)
    return ShardSet(directory, split, manifest, fields)


def _read_offsets(path: Path) -> np.ndarray:
    """A shard index: a 1-D integer array starting at 0 and never decreasing (never unpickled)."""
    try:
        offsets = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise DataError(
            f"shard index {path} is not a plain integer array ({str(error).splitlines()[0][:80]})"
        ) from None
    if (
        offsets.ndim != 1
        or offsets.dtype.kind not in "iu"
        or not len(offsets)
        or offsets[0] != 0
        or (np.diff(offsets) < 0).any()
    ):
        raise DataError(f"shard index {path} is not a list of increasing document offsets from 0")
    return offsets
