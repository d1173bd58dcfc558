"""Transcription: a recording's log-mel features in, its transcript out (Whisper's training examples).

Each pair (recording, transcript ids) becomes one row: the encoder input is the recording's log-mel
spectrogram, (n_mels, frames): 3000 frames of 30 s as Whisper reads it (encdec.audio), or the shorter window of a
model with fewer source positions; a recording longer than the window is refused. The labels are

    prompt + transcript + EOS        e.g. <|en|> <|transcribe|> <|notimestamps|> A dog runs. <|endoftext|>

with the decoder started from `decoder_start` (<|startoftranscript|>), as transformers' Whisper fine-tuning
lays them out. A run's own tokenizer has no such tokens: its prompt is empty and the decoder starts from the
tokenizer's own start. Recordings are read (bounded by the window) and their features made when a batch is
made, so a corpus of hours of audio never sits in memory; batches are bucketed by transcript length.

SpecAugment (Park et al. 2019, "SpecAugment: A Simple Data Augmentation Method for Automatic Speech
Recognition"): with `spec_augment`, each row gets frequency masks (bands of up to `freq_width` mel bins) and
time masks (up to `time_width` frames, and at most `time_fraction` of the recording's own frames, so a short
clip padded to 30 s is not masked away), filled with 0 as transformers' Whisper masks its features. The masks
are drawn from the batch's position, so a resumed run draws them again exactly.

Timestamps (Whisper's training rows, Radford et al. 2022, 2.3 and 2.4): with `timestamps`, each batch's
recordings are joined in their order into windows of several, a drawn silence between two, as many as fit the
window, the labels and `most`; a `fraction` of the windows (drawn) are written with Whisper's timestamp tokens,

    prompt (no <|notimestamps|>) + <|t0|> text <|t1|> <|t2|> text <|t3|> ... + EOS

each recording's start and end to the nearest 20 ms (the token after <|notimestamps|> is <|0.00|>); the others
keep <|notimestamps|> and their texts one after another. A model so trained writes the segments and times that
long-form transcription (encdec.transcription) moves on, over windows that hold several sentences, as a
recording's windows do. Two draws make the windows look like a long recording's: `lead`, a silence before the
first recording (its times count from the window's start, so the first is <|lead|>, as a window that long form
starts at the end of the last segment begins in the pause before the next); and `cut`, the share of windows
whose next recording, where it runs past the window's end, is placed with the part that fits (CUT_LEAST at
least) and written as Whisper's data writes a segment its window cuts: its start time alone,

    ... text <|t_end|> <|t_cut|> <|endoftext|>

so the decoding ends on a pair of timestamps and long-form seeks to <|t_end|> (openai-whisper's and
transformers' rule, encdec.generation.whisper_windows.split), not a whole window on (a window of whole
recordings ends on a lone timestamp). Each segment's text is written after a space (the tokenizer's `separator`
ids), as Whisper writes them, and a window without timestamps puts one between its texts: long form joins its
segments' tokens, and without it a window's sentences read "sea.The". A window drawn without timestamps keeps no
cut recording (its sound without its text taught the model to drop a window's trailing speech: docs/recipes.md);
the cut recording starts the next window whole either way. `previous`, the share of windows (drawn) prompted as
long form prompts a window with condition_on_prev_tokens: read before <|startofprev|>'s start token and not learned,

    <|startofprev|> the last texts of the batch's earlier windows <|startoftranscript|> prompt ... EOS

up to half the decoder's positions less one (max_target_len stands for them, as encdec.transcription keeps
them) and as many as fit beside the window's labels; a model never so trained reads a previous text as text to
go on with and repeats it. The joins, silences and prompts are drawn from the batch's position too.

Shapes: B batch, M mel bins, F frames (3000), T target length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from encdec.audio import HOP, N_FRAMES, SAMPLE_RATE, frame_lengths, log_mel, read_audio, read_audio_bytes
from encdec.data.batch import Batch, decoder_rows
from encdec.data.documents import Documents, token_dtype
from encdec.data.objectives.objective import EpochPlan, Objective
from encdec.data.speech import Recording, recording_name
from encdec.errors import ConfigError, DataError
from encdec.schema import Range

TASKS = ("transcribe", "translate")  # Whisper's: in the recording's language, or into English
START = "<|startoftranscript|>"
PREVIOUS = "<|startofprev|>"
NO_TIMESTAMPS = "<|notimestamps|>"
SECONDS_PER_TIMESTAMP = 0.02  # Whisper's timestamp tokens: <|0.00|>, <|0.02|>, ...
Masks = Annotated[int, Range(0, 16)]
CUT_LEAST = 0.5  # seconds: the least of a recording a window's end cuts that is placed in it
SMOOTHING_ON_TIMESTAMPS = 0.01  # above it, label smoothing's share on the timestamps is warned of as training starts


def smoothing_on_timestamps(label_smoothing: float, timestamps: int, vocab_size: int) -> float:
    """The probability that label smoothing keeps on the `timestamps` timestamp tokens at every target of a model
    of `vocab_size` logits (the smoothing spreads `label_smoothing` evenly over them all). Whisper's timestamp rule
    writes a timestamp wherever their summed probability beats the best text token's, so above a few hundredths
    the rule reads the smoothing as the model asking for one and long form ends windows early: 0.003 for Whisper's
    51,865 tokens at 0.1, 0.083 for the speech recipe's 1,810 (docs/transcribe.md)."""
    return label_smoothing * timestamps / vocab_size


def previous_text_room(positions: int) -> int:
    """The previous text's tokens a window's prompt keeps, as transformers' long form keeps them: half the
    decoder's `positions` less one."""
    return positions // 2 - 1


@dataclass(frozen=True)
class SpecAugment:
    """How many masks of what width each row gets (Park et al.'s LibriSpeech double policy by default)."""

    freq_masks: Masks = 2
    freq_width: Annotated[int, Range(0, 128)] = 27  # mel bins
    time_masks: Masks = 2
    time_width: Annotated[int, Range(0, 3000)] = 100  # frames (10 ms each)
    time_fraction: Annotated[float, Range(0, 1)] = 0.2  # a time mask covers at most this share of the recording

    def apply(self, features: torch.Tensor, frames: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """`features` (B, M, F) with each row's masks set to 0; `frames` (B,) the frames its recording fills."""
        bins = features.shape[1]
        keep = np.ones((features.shape[0], bins, features.shape[2]), dtype=bool)
        for row, length in enumerate(frames.tolist()):
            for _ in range(self.freq_masks):
                width = int(rng.integers(0, min(self.freq_width, bins) + 1))
                start = int(rng.integers(0, bins - width + 1))
                keep[row, start : start + width, :] = False
            widest = min(self.time_width, int(self.time_fraction * length))
            for _ in range(self.time_masks):
                width = int(rng.integers(0, widest + 1))
                start = int(rng.integers(0, max(length - width, 0) + 1))
                keep[row, :, start : start + width] = False
        return features * torch.from_numpy(keep).to(features.device)


@dataclass
class Window:
    """One joined window: `placed` [(start sample, wave), ...] its whole recordings, then, where `cut` (that
    recording's start sample) is set, the part of the next one that fits before the window's end; `texts` the
    whole recordings' texts (a cut recording's text is not written: its start time alone)."""

    placed: list
    texts: list
    cut: int | None = None


def written(texts: list, separator: int = 0) -> int:
    """The label tokens `texts` take with two timestamps and a `separator` (tokens) each."""
    return sum(len(text) + 2 + separator for text in texts)


@dataclass(frozen=True)
class Timestamps:
    """How recordings are joined into timestamped windows (see the module's docstring)."""

    fraction: Annotated[float, Range(0, 1)] = 0.5  # windows written with timestamps; the rest with <|notimestamps|>
    most: Annotated[int, Range(1, 64)] = 8  # recordings joined into one window at most
    gap: Annotated[float, Range(0, 10)] = 1.0  # seconds of silence between two joined recordings, drawn up to it
    lead: Annotated[float, Range(0, 10)] = 0.0  # seconds of silence before a window's first recording, drawn up to it
    # windows (drawn) that end inside the next recording, where it overruns; kept only where the window is written
    # with timestamps (its labels give the cut recording's start): without them the sound would have no text
    cut: Annotated[float, Range(0, 1)] = 0.0
    previous: Annotated[float, Range(0, 1)] = 0.0  # windows (drawn) read after the earlier windows' text

    def join(self, waves, texts, window: int, room: int, rng: np.random.Generator, separator: int = 0) -> list[Window]:
        """`waves` (each (N,) at 16 kHz) and their `texts` (id arrays) in order -> windows: each at most `window`
        samples and `most` whole recordings, whose texts with two timestamps and `separator` tokens each (and a
        cut one's start time) fit `room` tokens (a recording alone always makes a window). A recording that a
        window's end cuts starts the next window whole, so each is trained on whole once an epoch."""
        windows: list[Window] = []
        end = 0
        for wave, text in zip(waves, texts):
            silence = int(rng.uniform(0, self.gap) * SAMPLE_RATE)
            if windows:
                last = windows[-1]
                fits = end + silence + len(wave) <= window and len(last.placed) < self.most
                if fits and written([*last.texts, text], separator) <= room:
                    last.placed.append((end + silence, wave))
                    last.texts.append(text)
                    end += silence + len(wave)
                    continue
                self.cut_into(last, wave, end + silence, window, room - written(last.texts, separator), rng)
            start = self.lead_before(len(wave), window, rng)
            windows.append(Window([(start, wave)], [text]))
            end = start + len(wave)
        return windows

    def lead_before(self, length: int, window: int, rng: np.random.Generator) -> int:
        """The silence (samples) drawn before a window's first recording of `length` samples: up to `lead`
        seconds, as much as leaves it whole in the window (none drawn where `lead` is 0: today's windows)."""
        if self.lead == 0:
            return 0
        return min(int(rng.uniform(0, self.lead) * SAMPLE_RATE), max(window - length, 0))

    def cut_into(self, last: Window, wave, start: int, window: int, left: int, rng: np.random.Generator) -> None:
        """A `cut` share of the windows whose next recording (`wave`, due at sample `start`) runs past their end
        take the part of it that fits, CUT_LEAST seconds at least, and its start time in the labels where `left`
        tokens of room hold it (drawn only where the recording overruns and `cut` is above 0)."""
        if self.cut == 0 or start + len(wave) <= window or rng.random() >= self.cut:
            return
        if window - start >= CUT_LEAST * SAMPLE_RATE and left >= 1:
            last.placed.append((start, wave[: window - start]))
            last.cut = start


def transcription_prompt(tokenizer, language: str | None, task: str = "transcribe") -> tuple[int, tuple[int, ...]]:
    """(the token the decoder starts from, the prompt before each transcript), as transformers' Whisper starts its
    decoder. A tokenizer with Whisper's tokens: <|startoftranscript|>, then for a multilingual model (`language`
    given) <|language|> and <|task|>, then <|notimestamps|> where it holds one (an English-only model's prompt is
    <|startoftranscript|> <|notimestamps|>). Any other tokenizer: its own start and no prompt. One sentence where
    a language, a translation or a token is asked of a tokenizer without it."""
    start = tokenizer.special_id(START)
    if start is None and (language is not None or task != "transcribe"):
        asked = f"objective.language {language}" if language is not None else f"objective.task {task}"
        raise ConfigError(
            f"{asked} is a Whisper prompt token, which this run's {tokenizer.kind} tokenizer does not hold; start "
            f"from a Whisper directory's tokenizer, or add {START} and its tokens to tokenizer.extra_specials"
        )
    if start is None:
        return tokenizer.decoder_start_id, ()
    if task != "transcribe" and language is None:
        raise ConfigError(f"objective.task {task} needs objective.language, the language its recordings are in")
    names = [f"<|{language}|>", f"<|{task}|>"] if language is not None else []
    missing = [name for name in names if tokenizer.special_id(name) is None]
    if missing:
        raise ConfigError(f"the tokenizer has no token {missing[0]} for objective.language {language} and task {task}")
    if tokenizer.special_id(NO_TIMESTAMPS) is not None:
        names.append(NO_TIMESTAMPS)
    return start, tuple(tokenizer.special_id(name) for name in names)


def tokenize_transcripts(tokenizer, pairs: Sequence[tuple[Recording, str]]) -> tuple[list[Recording], Documents]:
    """(recordings, their transcripts as Documents of ids, no special tokens: the objective adds them)."""
    if not pairs:
        raise DataError("the corpus split is empty: no recordings to train or validate on")
    ids = tokenizer.encode([text for _, text in pairs])
    return [recording for recording, _ in pairs], Documents.from_lists(ids, token_dtype(tokenizer.vocab_size))


def read_recording(recording: Recording, max_seconds: float) -> torch.Tensor:
    """A recording's waveform at 16 kHz, from its path or its bytes (encdec.audio's bounds and refusals)."""
    if isinstance(recording, bytes):
        return read_audio_bytes(recording, max_seconds, name=recording_name(recording))
    return read_audio(recording, max_seconds)


class TranscribeObjective(Objective):
    name = "transcribe"

    def __init__(
        self,
        recordings: Sequence[Recording],
        targets: Documents,
        batch_size: int,
        pad_id: int,
        eos_id: int,
        decoder_start_id: int,
        prompt: Sequence[int] = (),
        max_target_len: int = 128,
        n_mels: int = 80,
        frames: int = N_FRAMES,
        spec_augment: SpecAugment | None = None,
        timestamps: Timestamps | None = None,
        no_timestamps_id: int | None = None,
        previous_id: int | None = None,
        separator: Sequence[int] = (),
        bucket_batches: int = 50,
        shuffle: bool = True,
        seed: int = 0,
    ):
        super().__init__(seed)
        if len(recordings) != len(targets):
            raise ConfigError(f"recordings ({len(recordings)}) and transcripts ({len(targets)}) must pair one to one")
        if max_target_len - len(prompt) - 1 < 1:
            raise ConfigError(
                f"max_target_len {max_target_len} leaves no room for a transcript beside its {len(prompt)} prompt "
                "tokens and EOS"
            )
        self.recordings, self.targets = list(recordings), targets
        self.pad_id, self.eos_id, self.decoder_start_id = pad_id, eos_id, decoder_start_id
        self.prompt = np.array(prompt, dtype=np.int64)
        self.max_target_len, self.n_mels, self.frames = max_target_len, n_mels, frames
        self.max_seconds = frames * HOP / SAMPLE_RATE  # a recording longer than the window is refused
        self.spec_augment, self.shuffle, self.timestamps = spec_augment, shuffle, timestamps
        self.separator = np.array(separator, dtype=np.int64)  # a space: between a joined window's texts
        if timestamps is not None and (no_timestamps_id is None or not prompt or prompt[-1] != no_timestamps_id):
            raise ConfigError(
                "objective.timestamps writes Whisper's timestamp tokens, which follow <|notimestamps|>: this run's "
                "tokenizer has none (start from a Whisper directory's)"
            )
        if timestamps is not None and timestamps.previous > 0 and previous_id is None:
            raise ConfigError(
                f"objective.timestamps.previous prompts windows with {PREVIOUS}, which this run's tokenizer does not "
                "hold (start from a Whisper directory's)"
            )
        self.previous_id = previous_id
        lengths = np.minimum(targets.lengths + len(prompt) + 1, max_target_len)
        self.plan = EpochPlan(len(targets), batch_size, lengths, bucket_batches)

    def labels(self, index: int) -> np.ndarray:
        """Pair `index`'s labels: prompt + transcript (cut to fit) + EOS."""
        room = self.max_target_len - len(self.prompt) - 1
        text = self.targets[index][:room].astype(np.int64)
        return np.concatenate([self.prompt, text, np.array([self.eos_id], np.int64)])

    def timed_labels(self, joined: Window) -> np.ndarray:
        """A joined window's labels with timestamps: the prompt without <|notimestamps|>, each whole recording's
        text between its start and end tokens (20 ms apart from <|0.00|>, the token after <|notimestamps|>, at
        the window's start), then a cut recording's start token alone, and EOS."""
        first = int(self.prompt[-1]) + 1

        def token(sample: int) -> np.ndarray:
            return np.array([first + round(sample / SAMPLE_RATE / SECONDS_PER_TIMESTAMP)])

        pieces = [self.prompt[:-1]]
        for (start, wave), text in zip(joined.placed, joined.texts):  # each segment's text after a space, as Whisper's
            pieces += [token(start), self.separator, text.astype(np.int64), token(start + len(wave))]
        if joined.cut is not None:  # openai-whisper's data: the segment the window cuts, its start time alone
            pieces.append(token(joined.cut))
        return np.concatenate([*pieces, np.array([self.eos_id], np.int64)])

    def joined(self, rows, waves: list, rng: np.random.Generator) -> tuple[list, list[np.ndarray], list[np.ndarray]]:
        """`rows`' recordings joined into windows (Timestamps.join) -> their waves, labels and texts (the labels
        less prompt and EOS, timestamps kept), in order."""
        room = self.max_target_len - len(self.prompt)  # text and times: the prompt's <|notimestamps|> gives way
        texts = [self.targets[int(i)] for i in rows]
        window = self.frames * HOP
        joined_waves, labels, bodies = [], [], []
        for joined in self.timestamps.join(waves, texts, window, room, rng, len(self.separator)):
            times = written(joined.texts, len(self.separator)) + (joined.cut is not None)
            timed = rng.random() < self.timestamps.fraction and times <= room
            if joined.cut is not None and not timed:  # a cut recording's sound only beside its start time
                joined.placed.pop()
                joined.cut = None
            length = max(start + len(w) for start, w in joined.placed)
            wave = torch.zeros(length, dtype=waves[0].dtype, device=waves[0].device)
            for start, w in joined.placed:
                wave[start : start + len(w)] = w
            joined_waves.append(wave)
            if timed:
                labels.append(self.timed_labels(joined))
            else:  # the whole recordings' texts one after another, a space between, cut to fit as one recording's
                parts = [piece for t in joined.texts for piece in (self.separator, t.astype(np.int64))][1:]
                text = np.concatenate(parts)[: room - 1]
                labels.append(np.concatenate([self.prompt, text, np.array([self.eos_id], np.int64)]))
            start = len(self.prompt) - int(timed)  # a timed window's prompt is the prompt less <|notimestamps|>
            bodies.append(labels[-1][start:-1])
        return joined_waves, labels, bodies

    def previous_texts(self, rows_labels: list[np.ndarray], bodies: list[np.ndarray], rng) -> list[np.ndarray]:
        """Each window's prompt before the decoder-start token: for a `previous` share (drawn, the first window
        aside), <|startofprev|> and the last tokens of the earlier windows' texts (`bodies`), up to
        previous_text_room(max_target_len) and as many as fit beside its labels; none for the rest."""
        keep, history, prefixes = previous_text_room(self.max_target_len), np.zeros(0, np.int64), []
        for labels, body in zip(rows_labels, bodies):
            fits = min(keep, self.max_target_len - len(labels) - 1, len(history))
            drawn = rng.random() < self.timestamps.previous
            prefixes.append(
                np.concatenate([[self.previous_id], history[-fits:]]) if drawn and fits > 0 else history[:0]
            )
            history = np.concatenate([history, body])
        return prefixes

    def batch_at(self, epoch: int, step: int) -> Batch:
        rows = self.plan.batches(self.seed, epoch, shuffle=self.shuffle)[step]
        waves = [read_recording(self.recordings[i], self.max_seconds) for i in rows]
        rng, prefixes = self.rng(epoch, step), None
        if self.timestamps is not None:
            waves, rows_labels, bodies = self.joined(rows, waves, self.rng(epoch, step, 1))
            if self.timestamps.previous > 0:
                prefixes = self.previous_texts(rows_labels, bodies, self.rng(epoch, step, 2))
        else:
            rows_labels = [self.labels(int(i)) for i in rows]
        features = log_mel(waves, self.n_mels, frames=self.frames)  # (B, M, F)
        if self.spec_augment is not None:
            features = self.spec_augment.apply(features, frame_lengths(waves, self.frames), rng)
        tgt_ids, labels = decoder_rows(rows_labels, self.pad_id, self.decoder_start_id, prefixes)
        return Batch(tgt_ids=tgt_ids, labels=labels, src_ids=features)

    def position_after(self, epoch: int, step: int) -> tuple[int, int]:
        step += 1
        last = step == len(self.plan.batches(self.seed, epoch, shuffle=self.shuffle))
        return (epoch + 1, 0) if last else (epoch, step)

    @property
    def batches_per_epoch(self) -> int:
        return len(self.plan.batches(self.seed, self.epoch, shuffle=self.shuffle))
