"""Long-form transcription against the same model on the recording's sentences one by one: WER and wall time.

    PYTHONPATH=src python benchmarks/bench_longform.py runs/speech runs/speech_data --index 0
    PYTHONPATH=src python benchmarks/bench_longform.py runs/speech2 runs/speech_data --index 1 --chunk-length 4 6 8

The recording is the index-th line of DATA/long.jsonl (scripts/speak.py --long writes it: a long recording, its
text and each sentence's span). Long-form transcription (encdec.transcription) reads the whole recording window
after window, greedy with and without the previous text as prompt, then with openai-whisper's fallback and
no-speech defaults; "within pieces" reads it window after window within pieces cut at its pauses of at most
each --chunk-length seconds, as `encdec transcribe --chunk-length` does (greedy, with and without the previous
text); "batched" cuts it so into pieces of at most chunk_length seconds (the model's window, then each
--chunk-length) and decodes them as one batch as `encdec transcribe --batched` does (greedy, no timestamps);
"one by one" cuts the recording at the sentences' spans and decodes each clip as `encdec generate` does. Sampling is seeded (0). WER (x100) is over the whole text, as written (no normalisation), the same for every
row.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from encdec.audio import SAMPLE_RATE, read_audio
from encdec.cli.options import whole_number
from encdec.errors import ConfigError
from encdec.evaluation.text_metrics import wer
from encdec.generation.text_generator import TextGenerator
from encdec.runs.open import open_model
from encdec.schema import argument_type
from encdec.transcription import Transcriber
from encdec.transcription.batched import ChunkLength, chunk_length_of, transcribe_batched, window_of

OPENAI_WHISPER = dict(
    temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
    compression_ratio_threshold=2.4,
    logprob_threshold=-1.0,
    no_speech_threshold=0.6,
)
ROWS = {
    "long-form, greedy, previous text": dict(condition_on_prev_tokens=True),
    "long-form, greedy": {},
    "long-form, openai-whisper's defaults": dict(condition_on_prev_tokens=True, **OPENAI_WHISPER),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("data", type=Path, help="the speech corpus directory holding long.jsonl")
    parser.add_argument(
        "--index", type=whole_number(0, 1 << 20, "--index"), default=0, help="which long recording (default 0)"
    )
    parser.add_argument("--threads", type=whole_number(1, 1024, "--threads"), default=1)
    parser.add_argument(
        "--chunk-length",
        type=argument_type(ChunkLength, "--chunk-length"),
        nargs="+",
        default=None,
        help="the longest piece in seconds of each batched row after the window's, at most the window (default: "
        "half of it); several make a row each",
    )
    try:
        args = parser.parse_args(argv)
    except ConfigError as error:  # a number out of its declared range: one sentence, argparse's exit
        parser.error(str(error))
    torch.set_num_threads(args.threads)
    records = [json.loads(line) for line in (args.data / "long.jsonl").read_text().splitlines()]
    if args.index >= len(records):
        parser.error(f"--index must be below {len(records)}, the recordings in {args.data / 'long.jsonl'}")
    record = records[args.index]
    wave, reference = read_audio(args.data / record["audio"]), [[record["text"]]]
    seconds = len(wave) / SAMPLE_RATE
    opened = open_model(args.model)
    window = window_of(opened.text)
    try:
        chunks = [chunk_length_of(c, opened.text, "--chunk-length") for c in args.chunk_length or [window / 2]]
    except ConfigError as error:
        parser.error(str(error))
    print(f"{record['audio']}: {seconds:.1f} s, {len(record['segments'])} sentences")
    print("| decoding | WER | segments | wall s | audio s / wall s |\n| --- | ---: | ---: | ---: | ---: |")
    for name, options in ROWS.items():
        torch.manual_seed(0)  # the fallback's sampled passes
        start = time.perf_counter()
        [transcript] = Transcriber(opened.model, opened.text, **options)([wave])
        wall = time.perf_counter() - start
        print(
            f"| {name} | {wer([transcript.text], reference):.1f} | {len(transcript.segments)} | {wall:.1f} | "
            f"{seconds / wall:.1f} |"
        )
    for chunk in chunks:  # window after window within pieces cut at pauses (`encdec transcribe --chunk-length`)
        for name, options in (("greedy", {}), ("greedy, previous text", dict(condition_on_prev_tokens=True))):
            start = time.perf_counter()
            [transcript] = Transcriber(opened.model, opened.text, chunk_length=chunk, **options)([wave])
            wall = time.perf_counter() - start
            print(
                f"| long-form within pieces of {chunk:g} s, {name} | {wer([transcript.text], reference):.1f} | "
                f"{len(transcript.segments)} | {wall:.1f} | {seconds / wall:.1f} |"
            )
    for chunk in (window, *chunks):
        start = time.perf_counter()
        with torch.inference_mode():
            [transcript] = transcribe_batched(
                opened.model, opened.text, [wave], opened.generation, chunk_length=chunk, return_timestamps=False
            )
        wall = time.perf_counter() - start
        print(
            f"| batched, chunk_length {chunk:g} s | {wer([transcript.text], reference):.1f} | "
            f"{len(transcript.segments)} | {wall:.1f} | {seconds / wall:.1f} |"
        )
    clips = [wave[int(s["start"] * SAMPLE_RATE) : int(s["end"] * SAMPLE_RATE)] for s in record["segments"]]
    generator, texts = TextGenerator(opened.text, opened.generation), []
    start = time.perf_counter()
    for first in range(0, len(clips), 16):
        texts += generator(opened.model, clips[first : first + 16])
    wall = time.perf_counter() - start
    print(
        f"| sentences one by one | {wer([' '.join(texts)], reference):.1f} | {len(clips)} | {wall:.1f} | "
        f"{seconds / wall:.1f} |"
    )


if __name__ == "__main__":
    main()
