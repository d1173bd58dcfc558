"""Sequence-to-sequence pairs: a text template, a truncation policy and length-bucketed batches.

The template is applied to the text before tokenizing: ROT5's summarization is
`PairTemplate("{source}\\nSummary:", "{target}")` (input = story + "\\nSummary:",
target = summary + EOS); translation is the default `"{source}" -> "{target}"`.
Targets always end with EOS. A pair in languages (data.src_lang / tgt_lang) has the codes around its ids
as the model's own tokenizer puts them (`PairEnds`, `pair_ends`): NLLB's `[eng_Latn] source </s>` and
`[deu_Latn] target </s>`. Truncation: `right` cuts the end of the source,
`left` cuts its start (keeping a template suffix such as "\\nSummary:"),
`drop` skips pairs that do not fit; what a pair starts and ends with (EOS, codes) is kept. Targets are cut at
the end.
With `pack`, each step's pairs share rows of max_source_len / max_target_len
tokens (data.objectives.packing) and are drawn without length bucketing.

Shapes: B batch, S source length, T target length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from encdec.data.batch import Batch, collate_encoder_decoder
from encdec.data.corpora import PairTemplate
from encdec.data.documents import Documents, token_dtype
from encdec.data.objectives.collate import collate_prefix_lm
from encdec.data.objectives.objective import EpochPlan, Objective
from encdec.data.objectives.packing import collate_packed
from encdec.errors import ConfigError
from encdec.tokenizers.languages import code_placement, takes_languages, target_language

TRUNCATIONS = ("right", "left", "drop")


@dataclass(frozen=True)
class PairEnds:
    """The ids around each pair's own, kept whole when a pair is cut, and the token the decoder starts from.
    Plain pairs: targets end with EOS. In languages (`pair_ends`), as the tokenizer puts its codes: NLLB's and
    M2M100's `[eng_Latn] source [</s>]`, `[deu_Latn] target [</s>]`; mBART's `source [</s>, en_XX]`, `target
    [</s>, ro_RO]`, its decoder starting from ro_RO (mBART's shift_tokens_right)."""

    decoder_start: int
    target_end: tuple[int, ...]  # (EOS,) for plain pairs
    source_start: tuple[int, ...] = ()
    source_end: tuple[int, ...] = ()
    target_start: tuple[int, ...] = ()

    def source_room(self, length: int) -> int:
        """A source's own ids that fit `length` tokens beside its start and end."""
        return length - len(self.source_start) - len(self.source_end)

    def target_room(self, length: int) -> int:
        return length - len(self.target_start) - len(self.target_end)


def pair_ends(tokenizer, src_lang: str | None = None, tgt_lang: str | None = None) -> PairEnds:
    """How pairs in `src_lang` and `tgt_lang` (None: no code on that side) are encoded by `tokenizer` (encdec's):
    the codes placed where its Hugging Face tokenizer places them (tokenizers.languages), else plain; one
    sentence where it has no such codes."""
    plain = PairEnds(tokenizer.decoder_start_id, (tokenizer.eos_id,))
    if src_lang is None and tgt_lang is None:
        return plain
    hf = getattr(tokenizer, "hf", None)  # a Hugging Face directory's own tokenizer (PretrainedTokenizer)
    if not takes_languages(hf):
        raise ConfigError(
            "data.src_lang and data.tgt_lang are language codes of a multilingual tokenizer (NLLB's, M2M100's, "
            f"mBART's): start from such a directory (training.init_from); this run's {tokenizer.kind} tokenizer has none"
        )
    source = code_placement(hf, src_lang, "data.src_lang") if src_lang is not None else ([], [])
    if tgt_lang is None:
        return PairEnds(plain.decoder_start, plain.target_end, tuple(source[0]), tuple(source[1]))
    start, end = code_placement(hf, tgt_lang, "data.tgt_lang")
    _, decoder_start = target_language(hf, tgt_lang, "data.tgt_lang")
    decoder_start = tokenizer.decoder_start_id if decoder_start is None else decoder_start
    return PairEnds(decoder_start, tuple(end), tuple(source[0]), tuple(source[1]), tuple(start))


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


def between(start: tuple[int, ...], ids: np.ndarray, end: tuple[int, ...]) -> np.ndarray:
    return np.concatenate([np.array(start, np.int64), ids.astype(np.int64), np.array(end, np.int64)])


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
        ends: PairEnds | None = None,
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
        self.pad_id, self.eos_id = pad_id, eos_id
        self.ends = ends or PairEnds(decoder_start_id, (eos_id,))
        self.decoder_start_id = self.ends.decoder_start
        if min(self.ends.source_room(max_source_len), self.ends.target_room(max_target_len)) < 1:
            raise ConfigError(
                f"max_source_len {max_source_len} and max_target_len {max_target_len} leave no room for text beside "
                "the special tokens around each source and target"
            )
        self.shuffle, self.batch_format, self.pack = shuffle, batch_format, pack
        e = self.ends
        src_len = sources.lengths + len(e.source_start) + len(e.source_end)
        tgt_len = targets.lengths + len(e.target_start) + len(e.target_end)
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
        """(source, target) of pair `index`, each between its ends (`PairEnds`; a target's EOS), cut by the policy."""
        e = self.ends
        source, room = self.sources[index], e.source_room(self.max_source_len)
        if len(source) > room:
            source = source[len(source) - room :] if self.truncation == "left" else source[:room]
        target = self.targets[index][: e.target_room(self.max_target_len)]
        return between(e.source_start, source, e.source_end), between(e.target_start, target, e.target_end)

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
