"""UL2's mixture of denoisers as ROT5 used it (SEEDS.md section 2), chosen per example.

- R (p 0.25): T5 span corruption, mean span 3, noise density 0.15.
- X (p 0.25): the union of two masks, (mean span 32, density 0.5) and (64, 0.2).
- S (p 0.5): prefix = the first max(len // 2, 2) tokens, target = the rest.

Documents are cut into chunks of at most `max_length` tokens; each chunk is one
example. Targets end with EOS. Optional mode tokens `[R]`/`[X]`/`[S]` are
prepended to the input (UL2 uses them; ROT5 did not). Plain T5 span corruption
is `UL2Config.span_corruption()`, the R-only case. `batch_format="prefix_lm"`
gives the same examples to a decoder-only model. With `pack`, each step's examples
share rows of max_length + 1 source and target tokens (data.objectives.packing).

Shapes: B batch, S source length, T target length, L chunk length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from encdec.data.batch import Batch, collate_encoder_decoder
from encdec.data.documents import Documents
from encdec.data.objectives.collate import collate_prefix_lm
from encdec.data.objectives.objective import EpochPlan, Objective
from encdec.data.objectives.packing import collate_packed
from encdec.data.objectives.span_corruption import random_spans_noise_mask, span_corrupt
from encdec.errors import ConfigError

MODES = ("R", "X", "S")
BATCH_FORMATS = ("encoder_decoder", "prefix_lm")


@dataclass(frozen=True)
class UL2Config:
    r_prob: float = 0.25
    x_prob: float = 0.25
    s_prob: float = 0.5
    r_masks: tuple[tuple[float, float], ...] = ((3.0, 0.15),)  # (mean span length, noise density)
    x_masks: tuple[tuple[float, float], ...] = ((32.0, 0.5), (64.0, 0.2))
    max_length: int = 512
    mode_tokens: bool = False

    def __post_init__(self):
        probs = (self.r_prob, self.x_prob, self.s_prob)
        if min(probs) < 0 or abs(sum(probs) - 1.0) > 1e-6:
            raise ConfigError(f"UL2 probabilities r_prob, x_prob, s_prob must be >= 0 and sum to 1, got {probs}")
        if self.max_length < 2:
            raise ConfigError(f"UL2 max_length must be at least 2, got {self.max_length}")

    @classmethod
    def span_corruption(cls, mean_span: float = 3.0, density: float = 0.15, max_length: int = 512) -> UL2Config:
        """Plain T5 span corruption: R only."""
        return cls(r_prob=1.0, x_prob=0.0, s_prob=0.0, r_masks=((mean_span, density),), max_length=max_length)

    @property
    def probabilities(self) -> np.ndarray:
        return np.array([self.r_prob, self.x_prob, self.s_prob])

    def longest(self) -> tuple[int, int]:
        """(inputs, targets): the most tokens an example holds, mode token and EOS included, over every chunk
        length and every denoiser drawn. A denoised chunk's inputs are never longer than it (a span becomes
        one sentinel); its targets hold the noise, a sentinel per span and EOS (X's masks summed: their union
        has no more of either), at most the whole chunk as one span and EOS."""
        length = np.arange(2, self.max_length + 1)  # (L,) every chunk length: chunks hold at least 2 tokens
        targets = [np.ones_like(length)]
        if self.s_prob:
            targets.append(length - np.maximum(length // 2, 2) + 1)  # s_split's prefix; the rest and EOS
        for prob, masks in ((self.r_prob, self.r_masks), (self.x_prob, self.x_masks)):
            if prob:
                noise, spans = zip(*(noise_counts(length, density, span) for span, density in masks), strict=True)
                targets.append(np.minimum(sum(noise) + sum(spans), length + 1) + 1)
        return self.max_length + int(self.mode_tokens), int(np.maximum.reduce(targets).max())


def noise_counts(length: np.ndarray, density: float, mean_span: float) -> tuple[np.ndarray, np.ndarray]:
    """(noise tokens, noise spans) random_spans_noise_mask draws in chunks of each of `length` (L,) tokens."""
    if density == 0.0:
        return 0 * length, 0 * length
    noise = np.clip(np.rint(np.maximum(length, 2) * density), 1, np.maximum(length, 2) - 1)
    return noise, np.minimum(np.maximum(np.rint(noise / mean_span), 1), length - noise)


def s_split(length: int) -> int:
    """Where S splits a chunk of `length` tokens: the prefix keeps max(length // 2, 2)."""
    return max(length // 2, 2)


def denoise(
    tokens: np.ndarray, mode: str, config: UL2Config, sentinel_ids: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of one chunk under denoiser `mode`, before EOS and mode tokens."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if mode == "S":
        split = s_split(len(tokens))
        return tokens[:split], tokens[split:]
    masks = config.r_masks if mode == "R" else config.x_masks
    noise = np.zeros(len(tokens), dtype=bool)
    for mean_span, density in masks:
        noise |= random_spans_noise_mask(len(tokens), density, mean_span, rng)
    return span_corrupt(tokens, noise, sentinel_ids)


class UL2Objective(Objective):
    name = "ul2"

    def __init__(
        self,
        documents: Documents,
        batch_size: int,
        pad_id: int,
        eos_id: int,
        decoder_start_id: int,
        sentinel_ids: list[int],
        config: UL2Config = UL2Config(),
        mode_ids: dict[str, int] | None = None,
        batch_format: str = "encoder_decoder",
        pack: bool = False,
        seed: int = 0,
    ):
        super().__init__(seed)
        if batch_format not in BATCH_FORMATS:
            raise ConfigError(f"batch format {batch_format!r} is unknown; choose one of {', '.join(BATCH_FORMATS)}")
        if pack and batch_format != "encoder_decoder":
            raise ConfigError("objective.pack packs encoder-decoder batches only, not the prefix-LM layout")
        if config.mode_tokens and not (mode_ids and set(MODES) <= set(mode_ids)):
            raise ConfigError(
                "UL2 mode_tokens needs ids for R, X and S; build the tokenizer with extra specials [R] [X] [S]"
            )
        self.tokens = documents.tokens
        self.starts, self.lengths = documents.chunks(config.max_length, min_len=2)  # (P,), (P,)
        self.plan = EpochPlan(len(self.starts), batch_size)
        self.config, self.batch_format, self.pack = config, batch_format, pack
        self.pad_id, self.eos_id, self.decoder_start_id = pad_id, eos_id, decoder_start_id
        self.sentinel_ids = np.asarray(sentinel_ids, dtype=np.int64)
        self.mode_ids = mode_ids or {}

    def example(self, chunk: int, mode: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets) of chunk number `chunk`: denoised, targets ending in EOS, mode token prepended."""
        start, length = int(self.starts[chunk]), int(self.lengths[chunk])
        inputs, targets = denoise(self.tokens[start : start + length], mode, self.config, self.sentinel_ids, rng)
        if len(targets) == 0 or targets[-1] != self.eos_id:
            targets = np.append(targets, self.eos_id)
        if self.config.mode_tokens:
            inputs = np.concatenate([[self.mode_ids[mode]], inputs])
        return inputs, targets

    def batch_at(self, epoch: int, step: int) -> Batch:
        chunk_ids = self.plan.batches(self.seed, epoch)[step]
        rng = self.rng(epoch, step)
        modes = [MODES[i] for i in rng.choice(3, size=len(chunk_ids), p=self.config.probabilities)]
        examples = [self.example(int(c), m, rng) for c, m in zip(chunk_ids, modes, strict=True)]
        if self.batch_format == "prefix_lm":
            return collate_prefix_lm(examples, self.pad_id, modes=modes)
        if self.pack:  # a chunk's inputs gain at most one sentinel per span and a mode token
            width = self.config.max_length + 1
            return collate_packed(examples, self.pad_id, self.decoder_start_id, width, width, modes=modes)
        return collate_encoder_decoder(examples, self.pad_id, self.decoder_start_id, modes=modes)

    def position_after(self, epoch: int, step: int) -> tuple[int, int]:
        step += 1
        return (epoch + 1, 0) if step == len(self.plan.batches(self.seed, epoch)) else (epoch, step)


def ul2_mode_ids(tokenizer) -> dict[str, int]:
    """{"R": id, "X": id, "S": id} from a tokenizer built with extra specials `[R]`, `[X]`, `[S]`."""
    ids = {mode: tokenizer.special_id(f"[{mode}]") for mode in MODES}
    missing = [f"[{m}]" for m, i in ids.items() if i is None]
    if missing:
        raise ConfigError(
            f"the tokenizer has no mode tokens {', '.join(missing)}; build it with extra_specials=('[R]', '[X]', '[S]')"
        )
    return ids
