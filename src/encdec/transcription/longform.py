"""Long-form transcription: recordings of any length decoded window after window (Whisper's 30 s: the model's
2 x max_source_positions frames), as openai-whisper's `transcribe` and transformers' Whisper long-form `generate`
run it (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision", 4.5).

    transcriber = Transcriber(opened.model, opened.text, language="en", temperature=[0.0, 0.2, 0.4])
    [transcript] = transcriber(["talk.wav"])                      # or transcribe(model, ["talk.wav"], text)

A window's decoding is cut into segments at its timestamp pairs (generation.whisper_windows.split) and timed from
the window's start; the next window starts at its last pair's time, or at the window's end where the decoding
ends on a lone timestamp or holds no pair. Each window is decoded with the temperature fallback and no-speech
detection of generation.fallback, under the options `generate` takes (a window of no speech adds no segment).
With condition_on_prev_tokens, a recording's prompt starts with <|startofprev|> and the last tokens of its
segments so far (half the decoder's positions less one; a segment's closing timestamp pair counts one), unless
its last decoding was kept at a temperature of 0.5 or above. The recordings of a call are decoded together, each
window the rows whose prompts have one length as one batch (a recording's prompt is never padded, so each
decodes as it would alone); the language, where not given, is detected once from each one's first window.
A recording of one window or less is read as `generate` reads it (transformers' short form): its whole window,
the log-mel of silence after it; a longer one's last window is padded with zeros (transformers' long form).
With return_timestamps=False (faster-whisper's and openai-whisper's without_timestamps) the windows follow one
another back to back, each decoded after <|notimestamps|> and one segment from its start to its end. Where a
recording's windows then do not depend on the one before (no previous text carried on), its next windows join the
batch, up to `window_batch` rows in all (faster-whisper's BatchedInferencePipeline batch_size, over windows back
to back): the weights are read once a step for all of them, and each window's output is the one it has decoded
alone (search without sampling; a sampled fallback pass draws its noise in another order).
With `chunk_length` each recording is first cut at its pauses into pieces of at most that many seconds (the cut
of batched transcription, transcription.segmentation) and the windows run within the pieces, from one piece to
the next, as openai-whisper's and faster-whisper's `clip_timestamps` run them: a window ends where its piece
ends, its frames after that are the log-mel of silence (each window's log-mel made from its own samples, as a
piece's in batched mode and a clip's in `generate`), the silence between pieces is never read, and the previous
text, timestamps and word times go on as without pieces. A model that reads a window of one or two sentences
better than one of several (a small one, trained on short windows) reads a long recording so about as well as
its sentences one by one, with the previous text and word times that batched mode lacks.

Shapes: B recordings, C mel bins, T frames (the longest recording's), W a window's frames, P prompt length.
"""

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated

import torch

from encdec.audio import HOP, SAMPLE_RATE, log_mel
from encdec.audio.recordings import MAX_SECONDS
from encdec.data.objectives.transcribe import previous_text_room
from encdec.errors import ConfigError, DataError
from encdec.generation.fallback import Kept, decode_with_fallback
from encdec.generation.generate import prepare, resolve_config
from encdec.generation.interface import capabilities_of, model_device
from encdec.generation.strategies import strategy_for
from encdec.generation.whisper_rules import init_tokens, language_after, needs_detection
from encdec.generation.whisper_windows import FRAMES_PER_TIMESTAMP, from_frame, split
from encdec.models.outputs import EncoderOutput
from encdec.runs.speech_text import Recording, waveform
from encdec.schema import Range, value_of
from encdec.transcription.segmentation import SPEECH_PAD, Seconds, cut_at_pauses, within_window
from encdec.transcription.transcript import Segment, Transcript
from encdec.transcription.word_times import token_timestamps
from encdec.transcription.words import segment_words

SECONDS_PER_FRAME = HOP / SAMPLE_RATE  # 10 ms
SECONDS_PER_TIMESTAMP = FRAMES_PER_TIMESTAMP * SECONDS_PER_FRAME  # 20 ms
LOW_TEMPERATURE = 0.5  # a decoding kept below it is carried on as the next window's prompt (openai-whisper's)
REFUSED = ("decoder_input_ids", "decoder_prompt", "num_return_sequences", "return_dict_in_generate")
WINDOW_BATCH = 8  # rows a recording's independent windows fill (faster-whisper's batched default)
WindowBatch = Annotated[int, Range(1, 256)]  # rows decoded together: window_batch, `encdec transcribe --batch-size`


class Transcriber:
    """A Whisper-ruled model (encdec's Whisper family, a run or a Hugging Face directory opened as `generate`
    opens it) and the options every window is decoded under: generate's (language, task, num_beams, temperature,
    the fallback's thresholds, max_new_tokens: half the decoder's positions unless given) and
    condition_on_prev_tokens; prompt_ids (<|startofprev|> and a text's ids) prompt the first window, or with
    condition_on_prev_tokens stand before the text carried on, as transformers takes them; `window_batch` the
    rows a recording's windows fill where they do not depend on each other; `chunk_length` (seconds, up to the
    model's window; None: no pieces) the pieces cut at pauses the windows run within, their speech padded by
    `speech_pad` seconds a side (see the module's docstring). `text` decodes a segment's tokens (the opened
    model's text encoding); without it segments have tokens and times but no text. Each option is checked here,
    in one sentence, before any audio."""

    def __init__(
        self,
        model,
        text=None,
        condition_on_prev_tokens: bool = False,
        max_seconds=MAX_SECONDS,
        word_timestamps: bool = False,
        window_batch: int = WINDOW_BATCH,
        chunk_length: float | None = None,
        speech_pad: float = SPEECH_PAD,
        **options,
    ):
        if not capabilities_of(model).reads_features:
            raise ConfigError("transcription needs a speech model (Whisper's family): this model reads text")
        refused = [name for name in REFUSED if options.get(name) not in (None, 1, False)]
        if refused:
            raise ConfigError(f"{refused[0]} is not an option of long-form transcription: its prompts are its own")
        if not 0 < max_seconds <= MAX_SECONDS:
            raise ConfigError(
                f"max_seconds must be above 0 and at most {MAX_SECONDS:,.0f} (two hours), got {max_seconds}"
            )
        self.model, self.text, self.condition, self.max_seconds = model, text, condition_on_prev_tokens, max_seconds
        if word_timestamps and text is None:
            raise ConfigError("word timestamps need the model's text encoding: words are read from decoded text")
        self.word_timestamps = word_timestamps
        self.window_batch = value_of(WindowBatch, window_batch, "window_batch")
        positions = model.config.positions.max
        self.options = {"max_new_tokens": positions // 2, "return_timestamps": True, **options}
        cfg = resolve_config(model, dict(self.options))  # every option checked before any audio is read
        if cfg.whisper is None:
            raise ConfigError("this model has no Whisper rules (its generation_config.json has no timestamps)")
        previous = cfg.whisper.prev_sot_token_id
        if (condition_on_prev_tokens or cfg.prompt_ids) and previous is None:
            raise ConfigError("a previous text needs <|startofprev|>: this model's rules have no prev_sot_token_id")
        if cfg.prompt_ids and cfg.prompt_ids[0] != previous:
            raise ConfigError(
                "prompt_ids must start with <|startofprev|> (the tokenizer's get_prompt_ids gives them so)"
            )
        language = cfg.language[:1] if isinstance(cfg.language, list) else cfg.language
        detected = [cfg.decoder_start_token_id] if needs_detection(cfg.whisper, cfg.language, cfg.task) else None
        init_tokens(cfg.whisper, cfg.decoder_start_token_id, 1, language, cfg.task, cfg.return_timestamps, detected)
        self.prompt_ids = list(cfg.prompt_ids or [])
        self.options.pop("prompt_ids", None)  # the prompts are made here, window by window
        self.cfg, self.window = cfg, 2 * model.config.audio.max_source_positions
        self.cut_off = previous_text_room(positions)  # the previous text's tokens a prompt keeps
        seconds = self.window * SECONDS_PER_FRAME
        self.chunk_length = None if chunk_length is None else within_window(chunk_length, seconds)
        self.speech_pad = value_of(Seconds, speech_pad, "speech_pad")

    def __call__(self, recordings: Sequence[Recording]) -> list[Transcript]:
        """A transcript of each recording (a path, a file's bytes, a waveform at 16 kHz), read within max_seconds."""
        if isinstance(recordings, (str, bytes, torch.Tensor)) or not recordings:
            raise DataError("give a list of recordings (paths, file bytes or waveforms), one or more")
        waves = [self.wave(recording, number) for number, recording in enumerate(recordings)]
        recorded = [math.ceil(len(wave) / HOP) for wave in waves]  # the frames that hold each recording
        frames = [max(self.window, n) for n in recorded]  # a short one: its whole window
        features = torch.zeros(len(waves), self.model.config.audio.n_mels, max(frames), device=waves[0].device)
        for row, wave in enumerate(waves):
            features[row, :, : frames[row]] = log_mel(wave, self.model.config.audio.n_mels, frames=frames[row])[0]
        prompts, encoded = self.prompts(features)
        codes = {token: name[2:-2] for name, token in self.cfg.whisper.lang_to_id.items()}
        pieces = None if self.chunk_length is None else [self.pieces(wave) for wave in waves]
        decoded = self.decode(features, frames, prompts, recorded, pieces, None if pieces is None else waves, encoded)
        transcripts = []
        for wave, prompt, segments in zip(waves, prompts, decoded):
            text = self.decoded([token for segment in segments for token in segment.tokens])  # openai-whisper's
            language = codes.get(prompt[1]) if len(prompt) > 1 else None
            duration = len(wave) / SAMPLE_RATE
            transcripts.append(Transcript(text, tuple(segments), duration, language, self.cfg.task or "transcribe"))
        return transcripts

    def wave(self, recording: Recording, number: int) -> torch.Tensor:
        """A recording as its waveform at 16 kHz, read within max_seconds; a waveform given is checked so too."""
        wave = waveform(recording, self.max_seconds)
        if not (isinstance(wave, torch.Tensor) and wave.dim() == 1 and wave.is_floating_point() and len(wave)):
            raise DataError(f"recording {number} must be a path, a file's bytes or a 1-D float waveform at 16 kHz")
        if len(wave) > self.max_seconds * SAMPLE_RATE:
            seconds = len(wave) / SAMPLE_RATE
            raise DataError(
                f"recording {number} lasts {seconds:,.1f} s, longer than the {self.max_seconds:,.1f} s allowed"
            )
        if not bool(torch.isfinite(wave).all()):
            raise DataError(f"recording {number} holds NaN or infinite samples; it is not a recording")
        return wave

    def pieces(self, wave: torch.Tensor) -> list[tuple[int, int]]:
        """A recording's pieces cut at its pauses (segmentation.cut_at_pauses, at most chunk_length seconds), as
        (start, end) samples in order."""
        return cut_at_pauses(wave, SAMPLE_RATE, self.chunk_length, speech_pad=self.speech_pad)

    def prompts(self, features: torch.Tensor) -> tuple[list[list[int]], torch.Tensor | None]:
        """Each recording's prompt (<|startoftranscript|> <|lang|> <|task|>, as whisper_rules.init_tokens makes
        it), its language given or detected from its first window as transformers detects a long-form batch's;
        and where it was detected, the first windows' encoder output (B, S, C), which the decoding reads again
        where a window is one of them (`encoded_windows`): the encoder runs once for each."""
        cfg, rules, batch = self.cfg, self.cfg.whisper, features.shape[0]
        detected, encoded = None, None
        if needs_detection(rules, cfg.language, cfg.task):
            first = features[:, :, : self.window]
            device = model_device(self.model)
            first = torch.nn.functional.pad(first, (0, self.window - first.shape[-1])).to(device)  # (B, C, W)
            mask = torch.ones(batch, self.window, dtype=torch.bool, device=device)
            with torch.inference_mode():
                memory = self.model.encode(first, mask)
                state = self.model.begin(memory, 1, 1)
                ids = language_after(self.model, state, first, rules, cfg.decoder_start_token_id)
            detected, encoded = ids.tolist(), memory.hidden
        prompts = init_tokens(
            rules, cfg.decoder_start_token_id, batch, cfg.language, cfg.task, cfg.return_timestamps, detected
        )
        return prompts, encoded

    def decode(
        self,
        features: torch.Tensor,
        frames: list[int],
        prompts: list[list[int]],
        recorded: list[int] | None = None,
        spans: list[list[tuple[int, int]]] | None = None,
        waves: list[torch.Tensor] | None = None,
        encoded: torch.Tensor | None = None,
    ) -> list[list[Segment]]:
        """Each recording's segments: features (B, C, T), each row's `frames` its own (the rest padding), each
        row's window decoded after its previous text (where carried on) and its prompt (`prompts`); `recorded`
        each row's frames that hold its recording (None: `frames`), the frames its word timestamps warp over;
        `spans` each row's pieces, (start, end) samples, the windows run within (None: the whole recording), whose
        windows' log-mels are then made from `waves` (each row's samples at 16 kHz); `encoded` the first windows'
        encoder output where `prompts` detected the language (None: none kept)."""
        recorded = frames if recorded is None else recorded
        clips = [[(0, n * HOP)] for n in frames] if spans is None else spans
        shortest = 1 if spans is None else FRAMES_PER_TIMESTAMP  # a piece's rest under 20 ms: nothing to time in it
        seek, carry = [0] * len(frames), [self.condition] * len(frames)
        segments: list[list[Segment]] = [[] for _ in frames]
        languages = self.languages(prompts)
        independent = not self.cfg.return_timestamps and not self.condition  # each window read as if alone
        with torch.inference_mode():
            while active := [row for row in range(len(frames)) if windows_from(clips[row], seek[row], 1, 1, shortest)]:
                whole = {row: self.previous_text(segments[row], carry[row]) + prompts[row] for row in active}
                for length in sorted({len(prompt) for prompt in whole.values()}):
                    rows = [row for row in active if len(whole[row]) == length]
                    each = max(self.window_batch // len(rows), 1) if independent else 1
                    windows = [
                        (row, *found)
                        for row in rows
                        for found in windows_from(clips[row], seek[row], self.window, each, shortest)
                    ]
                    rows, starts, lengths, samples = (list(column) for column in zip(*windows))
                    language = [languages[row] for row in rows] if isinstance(languages, list) else languages
                    window = self.window_features(features, waves, rows, starts, lengths, samples)
                    known = self.encoded_windows(window, features, rows, starts, encoded)
                    decoded = self.decode_window(window, [whole[row] for row in rows], language, known)
                    for index, (row, start, left, (tokens, ended, kept)) in enumerate(
                        zip(rows, starts, lengths, decoded)
                    ):
                        carry[row] = self.condition and kept.temperature < LOW_TEMPERATURE
                        if kept.skipped:  # no speech: the whole window passed over
                            seek[row] = start + left
                            continue
                        pieces, moved = split(tokens, self.cfg.whisper.timestamp_begin, left)
                        if not self.cfg.return_timestamps:  # a timestamp token is then text, read as it comes
                            pieces, moved = [tokens], left
                        timed = self.timed(pieces, tokens, start, left, kept, len(segments[row]))
                        if spans is not None:  # a piece's speech ends at its end: no time past it
                            timed = within(timed, samples[index][1] / SAMPLE_RATE)
                        if self.word_timestamps:
                            sequence = whole[row] + tokens + ended
                            where = (window[index : index + 1], start, warped_frames(recorded[row], start, left))
                            timed = self.with_words(timed, where, sequence, len(whole[row]), languages, row)
                        segments[row] += timed
                        seek[row] = start + (moved or left)  # a cut at 0 s would read the window again, unending
        return segments

    def window_features(self, features, waves, rows, starts, lengths, samples) -> torch.Tensor:
        """The windows (G, C, W) of `rows` from the frames in `starts`, `lengths` frames each: cut from `features`
        (zeros after a recording's end, as transformers' long form pads them), or where `waves` are given, each
        window's log-mel made from its own (start, end) `samples`, silence after them (a piece's window, as
        batched transcription's)."""
        if waves is None:
            ends = [start + length for start, length in zip(starts, lengths)]
            return from_frame(features[rows], starts, ends, self.window)
        slices = [waves[row][start:end] for row, (start, end) in zip(rows, samples)]
        return log_mel(slices, self.model.config.audio.n_mels, frames=self.window)

    @staticmethod
    def encoded_windows(window, features, rows: list[int], starts: list[int], encoded) -> dict:
        """{g: encoder output (S, C)} for each of the windows (G, C, W) of recordings `rows` from frames `starts`
        that is its recording's first window as `prompts` encoded it (features (B, C, T)'s first W frames, whose
        output is `encoded` (B, S, C)), equal to it value for value; the others are encoded by the decoding."""
        W = window.shape[-1]
        if encoded is None or features.shape[-1] < W:  # a window prompts() padded: not compared
            return {}
        return {
            g: encoded[row]
            for g, (row, start) in enumerate(zip(rows, starts))
            if start == 0 and torch.equal(window[g], features[row, :, :W])
        }

    def decode_window(self, window, prompts, language, known=None) -> list[tuple[list[int], list[int], Kept]]:
        """Windows (G, C, W: window_features') each decoded after its prompt (`prompts`, all of one length;
        `language` the option that keeps `prepare` from detecting it again) -> each window's tokens (EOS cut),
        [EOS] where the decoding wrote one (else []), and what its kept decoding scored. `known`: the encoder
        output of those windows already encoded (encoded_windows), by index; the others are encoded here."""
        job = prepare(self.model, window, None, **{**self.options, "language": language})
        prompt = torch.tensor(prompts, dtype=torch.long, device=job.device)  # (G, P): in place of prepare's
        room = self.model.config.positions.max - prompt.shape[1]
        if room < 1:
            raise ConfigError(f"a prompt of {prompt.shape[1]} tokens leaves the decoder no position to write in")
        cfg = replace(job.cfg, max_new_tokens=min(job.cfg.max_new_tokens, room))
        job = replace(job, prompt=prompt, cfg=cfg)
        new_tokens = cfg.max_new_tokens + prompt.shape[1] - 1
        if not known:
            state = self.model.start(job.src_ids, job.src_mask, new_tokens, job.rows)
        else:  # windows prompts() encoded to detect their language: the encoder runs for the others alone
            self.model.check_lengths(job.src_ids, new_tokens)
            state = self.model.begin(self.memory(job, known), new_tokens, job.rows)
        decoded, kept = decode_with_fallback(self.model, state, job, strategy_for)
        eos = cfg.eos_ids[0] if cfg.eos_ids else None
        ended = [bool(tokens) and tokens[-1] == eos for tokens in decoded]
        return [(t[:-1] if e else t, [eos] if e else [], k) for t, e, k in zip(decoded, ended, kept)]

    def memory(self, job, known: dict) -> EncoderOutput:
        """The encoder output (G, S, C) of the windows job.src_ids (G, C, W): `known`'s rows where given, the
        others encoded (one pass for all of them)."""
        first = next(iter(known.values()))
        hidden = first.new_empty(job.src_ids.shape[0], *first.shape)
        hidden[torch.tensor(list(known), device=hidden.device)] = torch.stack(list(known.values()))
        others = torch.tensor([g for g in range(job.src_ids.shape[0]) if g not in known], device=hidden.device)
        if len(others):
            mask = None if job.src_mask is None else job.src_mask[others]
            hidden[others] = self.model.encode(job.src_ids[others], mask).hidden
        return EncoderOutput(hidden, None)

    def with_words(self, segments: list[Segment], where, sequence: list[int], prompt: int, languages, row: int):
        """A window's `segments` with their words (transcription.word_times, words): `where` (window, seek,
        warped) the window's log-mel (1, C, W), its first frame and the frames of it the warp reads
        (warped_frames), `sequence` its prompt (`prompt` tokens), the tokens decoded and the EOS written, each
        segment's tokens in order after the prompt. A word's times are offset by its window's start (seek), as
        openai-whisper's and transformers' segments' token_timestamps are (see the test for transformers'
        flattened output, which is not)."""
        window, seek, warped = where
        device = model_device(self.model)
        ids = torch.tensor([sequence], dtype=torch.long, device=device)
        times = token_timestamps(self.model, window.to(device), ids, prompt, frames=warped)
        spans, start = [], prompt
        for segment in segments:
            spans.append((start, start + len(segment.tokens)))
            start += len(segment.tokens)
        language = languages[row] if isinstance(languages, list) else languages
        eos = self.cfg.eos_ids[0] if self.cfg.eos_ids else None
        words = segment_words(
            self.text,
            sequence,
            times.seconds[0].tolist(),
            times.probabilities[0].tolist(),
            spans,
            eos_id=eos,
            offset=seek * SECONDS_PER_FRAME,
            language=language,
        )
        return [replace(segment, words=tuple(w)) for segment, w in zip(segments, words)]

    def languages(self, prompts: list[list[int]]) -> str | list[str] | None:
        """The language option given, or where it was detected each prompt's (its second token): what keeps
        `prepare` from detecting it again, window after window (the prompts are made here)."""
        if not needs_detection(self.cfg.whisper, self.cfg.language, self.cfg.task):
            return self.cfg.language
        codes = {token: name[2:-2] for name, token in self.cfg.whisper.lang_to_id.items()}
        return [codes[prompt[1]] for prompt in prompts]

    def previous_text(self, segments: list[Segment], carried: bool) -> list[int]:
        """What a recording's window is prompted with before <|startofprev|>, as transformers' long-form prompt
        (prompt_condition_type "first-segment"): where its text is `carried` on, <|startofprev|> and the last
        tokens of prompt_ids and `segments` (each segment without the second timestamp of the pair that closes
        it); else prompt_ids as given; none where neither is."""
        first, tokens = self.cfg.whisper.timestamp_begin, self.prompt_ids[1:]
        for segment in segments:
            closed = len(segment.tokens) > 2 and segment.tokens[-2] >= first
            tokens += segment.tokens[:-1] if closed else segment.tokens
        if carried and tokens:
            return [self.cfg.whisper.prev_sot_token_id, *tokens[-self.cut_off :]]
        return list(self.prompt_ids)

    def timed(self, pieces, tokens, seek: int, left: int, kept: Kept, number: int) -> list[Segment]:
        """A window's segments (`pieces`, split from its decoding `tokens`) with their times, as transformers'
        `_retrieve_segment` gives them: from the window's start (`seek`), each segment from its first timestamp
        to its last (the first of a closing pair); a decoding with no pair is one segment from the window's start
        to its last timestamp, or to the end of the `left` frames it read where it has none."""
        first, offset = self.cfg.whisper.timestamp_begin, seek * SECONDS_PER_FRAME
        is_time = [token >= first and self.cfg.return_timestamps for token in tokens]
        if not any(a and b for a, b in zip(is_time, is_time[1:])):  # no pair: `pieces` is the decoding
            times = [token - first for token, time in zip(tokens, is_time) if time]
            spans = [(0, times[-1] if times and times[-1] > 0 else left // FRAMES_PER_TIMESTAMP)]
        else:
            closed = is_time[-2:] != [False, True]  # the last segment ends on a pair (cut off after it)
            spans = [
                (piece[0] - first, piece[-2 if closed and i == len(pieces) - 1 else -1] - first)
                for i, piece in enumerate(pieces)
            ]
        return [
            Segment(
                id=number + i,
                start=offset + start * SECONDS_PER_TIMESTAMP,
                end=offset + end * SECONDS_PER_TIMESTAMP,
                text=self.decoded(piece),
                tokens=tuple(piece),
                seek=seek,
                temperature=kept.temperature,
                avg_logprob=kept.avg_logprob,
                compression_ratio=kept.compression_ratio,
                no_speech_prob=kept.no_speech_prob,
            )
            for i, (piece, (start, end)) in enumerate(zip(pieces, spans))
        ]

    def decoded(self, tokens) -> str:
        """A segment's text: its tokens below the timestamps, special tokens dropped."""
        if self.text is None:
            return ""
        return self.text.decode(
            [t for t in tokens if t < self.cfg.whisper.no_timestamps_token_id], skip_special_tokens=True
        )


def within(segments: list[Segment], end: float) -> list[Segment]:
    """`segments` with no start or end past `end` seconds (a piece's; batched transcription's segments are so
    bounded): a random or unsure model may write timestamps to its window's end, past the piece's speech."""
    return [replace(s, start=min(s.start, end), end=min(s.end, end)) for s in segments]


def windows_from(pieces: list[tuple[int, int]], seek: int, window: int, most: int, shortest: int = 1) -> list[tuple]:
    """A recording's next `most` windows from frame `seek`, back to back within each of its `pieces` ((start, end)
    samples in order), none longer than `window` frames nor past its piece's end, nor shorter than `shortest`
    frames (a piece's rest shorter is passed over) -> [(first frame, frames, (start, end) samples), ...], the
    samples within the piece."""
    found: list[tuple] = []
    for begin, end in pieces:
        start, stop = max(begin // HOP, seek), -(-end // HOP)
        while stop - start >= shortest and len(found) < most:
            length = min(window, stop - start)
            found.append((start, length, (max(start * HOP, begin), min((start + length) * HOP, end))))
            start += length
    return found


def warped_frames(recorded: int, seek: int, left: int) -> int:
    """The frames of a window (from frame `seek`, `left` of them read) that its word timestamps warp over: those
    that hold the recording (`recorded` frames in all), as transformers' num_frames (the attention mask's sum less
    the seek). A short recording is decoded over its whole window (the log-mel of silence after it, as `generate`
    reads it), but only its own frames are warped over, as transformers warps them. Where the window starts at or
    past the recording's end (a short recording's decoding re-run after a timestamp pair past its last frame), the
    frames it read: transformers' num_frames is then 0 or negative and its slice [: num_frames // 2] keeps all the
    window's positions but that many from its end, which openai-whisper (that never decodes past the recording's
    frames) would call a bug."""
    return min(left, recorded - seek) if recorded - seek >= 2 else left


def transcribe(model, recordings: Sequence[Recording], text=None, **options) -> list[Transcript]:
    """A transcript of each recording by `model` (see Transcriber for `text` and the options)."""
    return Transcriber(model, text, **options)(recordings)
