"""`encdec transcribe MODEL AUDIO...`: recordings of any length as text, segments and subtitles.

    encdec transcribe runs/speech talk.wav                           # the text, printed
    encdec transcribe whisper-small/ a.wav b.flac --out subs/ --format srt,vtt --language en
    encdec transcribe whisper-small/ talk.mp3 --out out/ --format all --beams 5
    encdec transcribe runs/speech2 talk.wav --batched --chunk-length 8   # cut at its pauses, one batch
    encdec transcribe runs/speech2 talk.wav --chunk-length 6             # cut at its pauses, one after another

MODEL is what `encdec generate` opens (a run, a checkpoint directory, a Hugging Face Whisper directory); a text
model is refused. Each recording is decoded window after window by encdec.transcription.longform, with
openai-whisper's defaults: the previous text as prompt, temperature fallback (0, 0.2, ... 1.0) where a window's
output compresses above 2.4 or its log-probability averages below -1, and a window of no speech (<|nospeech|>
above 0.6) left out; each can be set, and --initial-prompt gives the text before the first window. With
--without-timestamps --no-previous-text no window waits for the one before: --batch-size of them decode together. With --out, one file per recording and format is written there (the
recording's name, its format's suffix: .txt, .json, .verbose.json, .srt, .vtt), each atomically and never
through a link; without it, each transcript is printed in the formats asked (the text by default).
--batched instead cuts each recording at its pauses into pieces of at most --chunk-length seconds (the model's
window by default) and decodes them as one batch (encdec.transcription.batched, faster-whisper's batched mode).
--chunk-length without --batched cuts so too, then reads the pieces one after another, window after window
within each, the previous text, timestamps and word times as without it (openai-whisper's clip_timestamps).
"""

import argparse
import sys
import typing
from pathlib import Path

import torch

from encdec.cli.held import say_unless_refused
from encdec.cli.options import (
    add_checkpoint_argument,
    add_device_argument,
    add_dtype_argument,
    add_generation_option,
    add_quantize_argument,
    open_to_decode,
    resolve_device,
    whole_number,
)
from encdec.cli.output_paths import InputPath, OutputPath
from encdec.errors import ConfigError
from encdec.generation.config import MAX_BEAMS, Temperature
from encdec.generation.generate import resolve_config
from encdec.generation.interface import capabilities_of
from encdec.quantization import quantize
from encdec.safe_paths import output_dir, write_atomic
from encdec.schema import argument_type
from encdec.tokenizers.languages import hf_tokenizer_of
from encdec.transcription import render
from encdec.transcription.batched import ChunkLength, chunk_length_of, transcribe_batched
from encdec.transcription.longform import Transcriber, WindowBatch
from encdec.transcription.response_formats import SUFFIXES
from encdec.transcription.segmentation import SPEECH_PAD, Seconds

FORMAT_NAMES = {"txt": "text", "json": "json", "verbose_json": "verbose_json", "srt": "srt", "vtt": "vtt"}
FILE_SUFFIXES = {**SUFFIXES, "verbose_json": ".verbose.json"}  # beside json's .json
MAX_RECORDINGS = 10_000  # named on one command line
MAX_PROMPT_CHARS = 2_000  # --initial-prompt's text: a prompt keeps the last tokens of half the decoder's positions
OPENAI_WHISPER = dict(  # openai-whisper's `transcribe` defaults (its cli.py)
    temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
    compression_ratio_threshold=2.4,
    logprob_threshold=-1.0,
    no_speech_threshold=0.6,
)
THRESHOLDS = ("compression_ratio_threshold", "logprob_threshold", "no_speech_threshold", "max_new_tokens")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("transcribe", description=__doc__)
    parser.add_argument(
        "model_dir", type=InputPath("the model", Path), help="a run directory, checkpoint or Hugging Face Whisper"
    )
    parser.add_argument("audio", nargs="+", type=InputPath("the recording", Path), help="wav, flac, ogg or mp3 files")
    parser.add_argument(
        "--out", type=OutputPath("--out", "a directory for the transcripts", Path, directory=True), default=None
    )
    parser.add_argument(
        "--format",
        type=formats,
        default=None,
        help=f"{', '.join(FORMAT_NAMES)} (comma-separated) or all (default: all with --out, else txt)",
    )
    add_generation_option(parser, "language", None)
    add_generation_option(parser, "task", None)
    parser.add_argument(
        "--beams", dest="num_beams", type=whole_number(1, MAX_BEAMS, "--beams"), default=None, help="beam width"
    )
    parser.add_argument(
        "--temperature",
        type=argument_type(typing.get_args(Temperature)[1], "--temperature"),
        default=None,
        help="the fallback's temperatures, comma-separated; 0 is greedy (default: 0,0.2,0.4,0.6,0.8,1)",
    )
    for name in THRESHOLDS:
        add_generation_option(parser, name, None)
    parser.add_argument(
        "--initial-prompt",
        type=bounded_text,
        default=None,
        help="text the first window continues (names, spellings, a style), openai-whisper's --initial_prompt",
    )
    parser.add_argument(
        "--no-previous-text",
        dest="condition_on_prev_tokens",
        action="store_false",
        help="do not prompt each window with the text before it",
    )
    parser.add_argument(
        "--batch-size",
        type=argument_type(WindowBatch, "--batch-size"),
        default=8,
        help="rows decoded together (default 8): recordings, and with --without-timestamps --no-previous-text a "
        "recording's windows (faster-whisper's batch_size)",
    )
    parser.add_argument("--word-timestamps", action="store_true", help="each word's start and end (verbose_json)")
    parser.add_argument(
        "--without-timestamps",
        dest="return_timestamps",
        action="store_false",
        help="decode no timestamp tokens: windows back to back, one segment each (faster-whisper's without_timestamps)",
    )
    parser.add_argument(
        "--batched",
        action="store_true",
        help="cut each recording at its pauses and decode the pieces as one batch (no previous text)",
    )
    parser.add_argument(
        "--chunk-length",
        type=argument_type(ChunkLength, "--chunk-length"),
        default=None,
        help="cut each recording at its pauses into pieces of at most this many seconds (speech merged up to it), "
        "from 0.1 to the model's window: decoded as one batch with --batched (default there: the window; "
        "faster-whisper's chunk_length), else one after another, windows ending where their pieces end",
    )
    parser.add_argument(
        "--speech-pad",
        type=argument_type(Seconds, "--speech-pad"),
        default=None,
        help="the pieces' silence kept each side of speech in seconds, with --batched or --chunk-length (default "
        "0; faster-whisper's speech_pad_ms is 0.4 s, for models trained with silence around speech)",
    )
    add_checkpoint_argument(parser)
    add_dtype_argument(parser)
    add_device_argument(parser)
    add_quantize_argument(parser)
    parser.set_defaults(func=run)


def formats(text: str) -> list[str]:
    """--format's value: response formats by the names the command takes, or all of them."""
    names = [name.strip() for name in text.split(",")]
    if names == ["all"]:
        return list(FORMAT_NAMES.values())
    unknown = [name for name in names if name not in FORMAT_NAMES]
    if unknown or not names:
        raise ConfigError(f"--format takes {', '.join(FORMAT_NAMES)} or all, got {unknown[0][:40]!r}")
    return list(dict.fromkeys(FORMAT_NAMES[name] for name in names))


def bounded_text(text: str) -> str:
    if not text.strip() or len(text) > MAX_PROMPT_CHARS:
        raise ConfigError(f"--initial-prompt must hold some text, at most {MAX_PROMPT_CHARS:,} characters")
    return text


def prompt_ids(speech_text, prompt: str, previous: int | None) -> list[int]:
    """--initial-prompt as Whisper's tokenizer writes a prompt (get_prompt_ids): <|startofprev|>, then the ids of
    the text with a space before it, by the model's tokenizer (a Hugging Face one, or a run's own)."""
    if previous is None:
        raise ConfigError("--initial-prompt needs <|startofprev|>: this model's rules have no prev_sot_token_id")
    text = getattr(speech_text, "text", speech_text)  # SpeechText's tokenizer
    tokenizer = hf_tokenizer_of(text)
    spaced = " " + prompt.strip()
    ids = tokenizer.encode(spaced, add_special_tokens=False) if tokenizer is not None else text.tokenizer.encode(spaced)
    return [previous, *ids]


def options_of(args: argparse.Namespace) -> dict:
    """The decoding options the command line gives, over openai-whisper's defaults."""
    given = {name: getattr(args, name) for name in ("language", "task", "num_beams", "return_timestamps", *THRESHOLDS)}
    if args.temperature is not None:
        given["temperature"] = [float(t) for t in args.temperature]
    return OPENAI_WHISPER | {name: value for name, value in given.items() if value is not None}


def check_recordings(audio: list[Path], out: Path | None) -> None:
    """At most MAX_RECORDINGS, and with --out no two of one name (their files would be one)."""
    if len(audio) > MAX_RECORDINGS:
        raise ConfigError(f"{len(audio):,} recordings named: at most {MAX_RECORDINGS:,} at once")
    stems = [path.stem for path in audio]
    twice = next((stem for stem in stems if stems.count(stem) > 1), None)
    if out is not None and twice is not None:
        raise ConfigError(f"two recordings are named {twice!r}: their transcripts in --out would be one file")


def run(args: argparse.Namespace) -> int:
    check_recordings(args.audio, args.out)
    if args.speech_pad is not None and not args.batched and args.chunk_length is None:
        raise ConfigError(
            "--speech-pad pads the pieces cut at pauses: add --chunk-length or --batched, or leave it out"
        )
    fmts = args.format or (list(FORMAT_NAMES.values()) if args.out is not None else ["text"])
    device = resolve_device(args.device)
    opened = open_to_decode(args.model_dir, args, device)
    say_unless_refused(opened.said)
    if not capabilities_of(opened.model).reads_features:
        raise ConfigError(f"{args.model_dir} is a text model: transcribe needs a speech model (Whisper's family)")
    model = opened.model.to(device)
    if args.quantize:
        model = quantize(model, args.quantize)
    options = options_of(args)
    if args.initial_prompt is not None:
        rules = resolve_config(model, {}).whisper
        previous = rules.prev_sot_token_id if rules is not None else None
        options["prompt_ids"] = prompt_ids(opened.text, args.initial_prompt, previous)
    pad = SPEECH_PAD if args.speech_pad is None else args.speech_pad
    chunk_length = chunk_length_of(args.chunk_length, opened.text, "--chunk-length")  # the window where not given
    if args.batched:  # every piece of the batch's recordings at once (transcription.batched): no previous text

        def transcriber(paths):
            return transcribe_batched(
                model,
                opened.text,
                paths,
                opened.generation,
                chunk_length=chunk_length,
                speech_pad=pad,
                word_timestamps=args.word_timestamps,
                **options,
            )
    else:
        transcriber = Transcriber(
            model,
            opened.text,
            condition_on_prev_tokens=args.condition_on_prev_tokens,
            word_timestamps=args.word_timestamps,
            window_batch=args.batch_size,
            chunk_length=None if args.chunk_length is None else chunk_length,
            speech_pad=pad,
            **options,
        )
    out = output_dir(args.out, "--out") if args.out is not None else None
    for start in range(0, len(args.audio), args.batch_size):
        batch = args.audio[start : start + args.batch_size]
        with torch.inference_mode():
            transcripts = transcriber([str(path) for path in batch])
        for path, transcript in zip(batch, transcripts):
            for fmt in fmts:
                if out is None:
                    sys.stdout.write(render(transcript, fmt).rstrip("\n") + "\n")
                else:
                    write_atomic(out / (path.stem + FILE_SUFFIXES[fmt]), render(transcript, fmt))
            sys.stdout.flush()
    return 0
