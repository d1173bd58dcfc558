"""Sequence-to-sequence pairs: a text template, a truncation policy and length-bucketed batches.

The template is applied to the text before tokenizing: ROT5's summarization is
`PairTemplate("{source}\\nSummary:", "{target}")` (input = story + "\\nSummary:",
target = summary + EOS); translation is the default `"{source}" -> "{target}"`.
Targets always end with EOS. Truncation: `right` cuts the end of the source,
`left` cuts its start (keeping a template suffix such as "\\nSummary:"),
`drop` skips pairs that do not fit. Targets are cut at the end, keeping EOS.
With `pack`, each step's pairs share rows of max_source_len / max_target_len
tokens (data.objectives.packing) and are drawn without length bucketing.

Shapes: B batch, S source length, T target length.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from encdec.data.batch import Batch, collate_encoder_decoder
from encdec.data.corpora import PairTemplate
from encdec.data.documents import Documents, token_dtype
from encdec.data.objectives.collate import collate_prefix_lm
from encdec.data.objectives.objective import EpochPlan, Objective
from encdec.data.objectives.packing import collate_packed
from encdec.errors import ConfigError

TRUNCATIONS = ("right", "left", "drop")


def tokenize_pairs(
    tokenizer, pairs: Iterable[tuple[str, str]], template: PairTemplate = PairTemplate(), batch: int = 1024
) -> tuple[Documents, Documents]:
    """(sources, targets) as aligned Documents, template applied, no BOS/EOS (the objective adds EOS)."""
    sources: list[list[int]] = []
    targets: list[list[int]] = []
    pending: list[tuple[str, str]] = []

    def flush():
        if pending:
            sources.extend(tokenizer.encode([s for s, _ in pending]))
            targets.extend(tokenizer.encode([t for _, t in pending]))
            pending.clear()

    for source, target in pairs:
        pending.append(template.apply(source, target))
        if len(pending) >= batch:
            flush()
    flush()
    dtype = token_dtype(tokenizer.vocab_size)
    return Documents.from_lists(sources, dtype), Documents.from_lists(targets, dtype)


class Seq2SeqObjective(Objective):
    name = "seq2seq"

    def __init__(
        self,
        sources: Documents,
        targets: Documents,
        batch_size: int,
        pad_id: int,
        eos_id: int,
        decoder_start_id: int,
        max_source_len: int = 512,
        max_target_len: int = 128,
        truncation: str = "right",
        bucket_batches: int = 50,
        shuffle: bool = True,
        batch_format: str = "encoder_decoder",
        pack: bool = False,
        seed: int = 0,
        batch_tokens: int | None = None,
    ):
        super().__init__(seed)
        if pack and batch_tokens is not None:
            raise ConfigError(
                "training.batch_tokens sizes batches by their padded tokens; objective.pack fills rows instead: "
                "choose one"
            )
        self.batch_tokens = batch_tokens
        if pack and batch_format != "encoder_decoder":
            raise ConfigError("objective.pack packs encoder-decoder batches only, not the prefix-LM layout")
        if truncation not in TRUNCATIONS:
            raise ConfigError(f"truncation {truncation!r} is unknown; choose one of {', '.join(TRUNCATIONS)}")
        if len(sources) != len(targets):
            raise ConfigError(f"sources ({len(sources)}) and targets ({len(targets)}) must pair one to one")
        self.sources, self.targets = sources, targets
        self.max_source_len, self.max_target_len, self.truncation = max_source_len, max_target_len, truncation
        self.pad_id, self.eos_id, self.decoder_start_id = pad_id, eos_id, decoder_start_id
        self.shuffle, self.batch_format, self.pack = shuffle, batch_format, pack
        src_len, tgt_len = sources.lengths, targets.lengths + 1
        self.indices = np.arange(len(sources))
        if truncation == "drop":
            self.indices = self.indices[(src_len <= max_source_len) & (tgt_len <= max_target_len)]
        lengths = np.minimum(src_len, max_source_len) + np.minimum(tgt_len, max_target_len)
        # Packing fills rows best from examples of mixed lengths: it takes the place of length bucketing.
        bucket_lengths = None if pack else lengths[self.indices]
        sizes = np.stack((np.minimum(src_len, max_source_len), np.minimum(tgt_len, max_target_len)), 1)[self.indices]
        self.plan = EpochPlan(
            len(self.indices), batch_size, bucket_lengths, bucket_batches, batch_tokens=batch_tokens, sizes=sizes
        )

    def example(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, target + EOS) of pair `index`, truncated by the policy."""
        source = self.sources[index].astype(np.int64)
        if len(source) > self.max_source_len:
            source = source[-self.max_source_len :] if self.truncation == "left" else source[: self.max_source_len]
        target = np.append(self.targets[index][: self.max_target_len - 1].astype(np.int64), self.eos_id)
        return source, target

    def batch_at(self, epoch: int, step: int) -> Batch:
        batches = self.plan.batches(self.seed, epoch, shuffle=self.shuffle)
        examples = [self.example(int(self.indices[i])) for i in batches[step]]
        if self.batch_format == "prefix_lm":
            return collate_prefix_lm(examples, self.pad_id)
        if self.pack:
            return collate_packed(
                examples, self.pad_id, self.decoder_start_id, self.max_source_len, self.max_target_len
            )
        return collate_encoder_decoder(examples, self.pad_id, self.decoder_start_id)

    def position_after(self, epoch: int, step: int) -> tuple[int, int]:
        step += 1
        return (
            (epoch + 1, 0) if step == len(self.plan.batches(self.seed, epoch, shuffle=self.shuffle)) else (epoch, step)
        )

    @property
    def batches_per_epoch(self) -> int:
        return len(self.plan.batches(self.seed, self.epoch, shuffle=self.shuffle))
