"""The one place an objective is built by name, for the trainer and for `encdec data inspect` alike.

    causal_lm        windows of the token stream and their next tokens (decoder-only, the seeds' encoder-decoders)
    span_corruption  T5 span corruption: UL2's R denoiser alone
    ul2              UL2's mixture of the R, X and S denoisers (ROT5's pretraining)
    prefix_lm        S's split of each chunk, for a decoder-only model
    seq2seq          (source, target) pairs, e.g. translation or summarization
    transcribe       (recording, transcript) pairs: log-mel features in, the transcript out (speech)

Every objective but seq2seq and transcribe takes `Documents`; seq2seq takes the pair (sources, targets),
transcribe the pair (recordings, transcripts).
"""

from __future__ import annotations

from collections.abc import Sequence

from encdec.data.documents import Documents
from encdec.data.objectives.causal_lm import CausalLMObjective
from encdec.data.objectives.objective import Objective
from encdec.data.objectives.prefix_lm import prefix_lm_objective
from encdec.data.objectives.seq2seq import PairEnds, Seq2SeqObjective
from encdec.data.objectives.transcribe import SpecAugment, Timestamps, TranscribeObjective
from encdec.data.objectives.ul2 import UL2Config, UL2Objective, ul2_mode_ids
from encdec.errors import ConfigError

OBJECTIVES = ("causal_lm", "span_corruption", "ul2", "prefix_lm", "seq2seq", "transcribe")
PAIRED = ("seq2seq", "transcribe")  # the objectives of (source, target) pairs
PACKABLE = ("seq2seq", "span_corruption", "ul2")  # the encoder-decoder objectives: causal_lm windows are full already


def longest_rows(
    kind: str, *, seq_len: int = 512, max_source_len: int = 512, max_target_len: int = 128, **options
) -> tuple[int, int]:
    """(source, target): the most positions a row of objective `kind`'s batches holds on each side, from the
    options `build_objective` takes (a causal LM's one stream counts as its target, its source 0); what a
    model's position tables must cover."""
    if kind == "seq2seq":
        return max_source_len, max_target_len
    if kind == "transcribe":  # a recording's frames are the front end's window, which the model checks itself
        return 0, max_target_len
    if kind in ("causal_lm", "prefix_lm"):  # a window; S's prefix and rest, EOS last and not read
        return 0, seq_len
    keys = ("mean_span", "noise_density", "ul2_probabilities", "mode_tokens")
    return denoisers(kind, seq_len, **{key: options[key] for key in keys if key in options}).longest()


def denoisers(
    kind: str,
    seq_len: int,
    mean_span: float = 3.0,
    noise_density: float = 0.15,
    ul2_probabilities: Sequence[float] = (0.25, 0.25, 0.5),
    mode_tokens: bool = False,
) -> UL2Config:
    """The denoisers of `kind` span_corruption (R alone) or ul2 (R, X and S) over chunks of seq_len tokens."""
    if kind == "span_corruption":
        return UL2Config.span_corruption(mean_span, noise_density, max_length=seq_len)
    r, x, s = ul2_probabilities
    return UL2Config(
        r_prob=r, x_prob=x, s_prob=s, r_masks=((mean_span, noise_density),), max_length=seq_len, mode_tokens=mode_tokens
    )


def build_objective(
    kind: str,
    data: Documents | tuple[Documents, Documents],
    tokenizer,
    batch_size: int,
    seed: int = 0,
    *,
    seq_len: int = 512,
    windows: str = "random",
    max_source_len: int = 512,
    max_target_len: int = 128,
    noise_density: float = 0.15,
    mean_span: float = 3.0,
    ul2_probabilities: Sequence[float] = (0.25, 0.25, 0.5),
    mode_tokens: bool = False,
    pack: bool = False,
    batch_tokens: int | None = None,
    ends: PairEnds | None = None,
    prompt: Sequence[int] = (),
    decoder_start: int | None = None,
    n_mels: int = 80,
    frames: int = 3000,
    spec_augment: SpecAugment | None = None,
    timestamps: Timestamps | None = None,
    no_timestamps_id: int | None = None,
    previous_id: int | None = None,
) -> Objective:
    """The objective `kind` over `data`: documents, or (sources, targets) for seq2seq.

    `seq_len` is the causal LM's window and the chunk length of the denoisers; the R
    denoiser masks `noise_density` of a chunk in spans of mean `mean_span`; `mode_tokens`
    prepends UL2's [R] / [X] / [S] to ul2's inputs (the tokenizer must hold them); `pack` lays
    the examples of each step out several to a row (seq2seq, span_corruption and ul2 only);
    `batch_tokens` sizes seq2seq batches by a token budget instead of `batch_size` rows; `ends` are the ids
    around each seq2seq pair's own (a target's EOS, language codes: seq2seq.pair_ends). transcribe's labels start
    with `prompt` (Whisper's language and task tokens) after `decoder_start` (default: the tokenizer's), its
    features have `n_mels` bins over `frames` and, with `spec_augment`, masks; with `timestamps`, its rows join
    several recordings and write Whisper's timestamp tokens, the first after `no_timestamps_id`, and prompt some
    windows with `previous_id` (<|startofprev|>) and the text before them.
    """
    tok = tokenizer
    if kind not in OBJECTIVES:
        raise ConfigError(f"objective {kind!r} is unknown; choose one of {', '.join(OBJECTIVES)}")
    if pack and kind not in PACKABLE:
        raise ConfigError(f"objective.pack works with {', '.join(PACKABLE)}, not {kind}")
    if batch_tokens is not None and kind != "seq2seq":
        raise ConfigError(f"training.batch_tokens sizes seq2seq batches by their tokens; objective {kind} has none")
    if kind == "causal_lm":
        return CausalLMObjective(data, seq_len, batch_size, mode=windows, seed=seed)
    if kind == "prefix_lm":
        return prefix_lm_objective(data, batch_size, tok.pad_id, tok.eos_id, max_length=seq_len, seed=seed)
    if kind == "seq2seq":
        sources, targets = data
        return Seq2SeqObjective(
            sources,
            targets,
            batch_size,
            tok.pad_id,
            tok.eos_id,
            tok.decoder_start_id,
            max_source_len,
            max_target_len,
            pack=pack,
            seed=seed,
            batch_tokens=batch_tokens,
            ends=ends,
        )
    if kind == "transcribe":
        recordings, transcripts = data
        return TranscribeObjective(
            recordings,
            transcripts,
            batch_size,
            tok.pad_id,
            tok.eos_id,
            tok.decoder_start_id if decoder_start is None else decoder_start,
            prompt,
            max_target_len,
            n_mels,
            frames,
            spec_augment=spec_augment,
            timestamps=timestamps,
            no_timestamps_id=no_timestamps_id,
            previous_id=previous_id,
            separator=tok.encode(" "),  # between a joined window's texts, as a long recording's text reads
            seed=seed,
        )
    config = denoisers(kind, seq_len, mean_span, noise_density, ul2_probabilities, mode_tokens)
    if not tok.sentinel_ids and (config.r_prob or config.x_prob):  # before any batch: the first would fail
        raise ConfigError(
            f"objective.kind {kind} marks spans with sentinels, which this tokenizer has none of (as Gemma's, Llama's "
            "and Qwen's): train PrefixLM alone, ul2 with ul2_probabilities [0, 0, 1]"
        )
    modes = ul2_mode_ids(tok) if config.mode_tokens else None  # span corruption has no mode token
    return UL2Objective(
        data,
        batch_size,
        tok.pad_id,
        tok.eos_id,
        tok.decoder_start_id,
        list(tok.sentinel_ids),
        config,
        mode_ids=modes,
        pack=pack,
        seed=seed,
    )
