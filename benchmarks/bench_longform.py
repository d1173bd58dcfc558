"""Long-form transcription against the same model on the recording's sentences one by one: WER and wall time.

    PYTHONPATH=src python benchmarks/bench_longform.py runs/speech runs/speech_data --index 0

The recording is the index-th line of DATA/long.jsonl (scripts/speak.py --long writes it: a long recording, its
text and each sentence's span). Long-form transcription (encdec.transcription) reads the whole recording window
after window, greedy with and without the previous text as prompt, then with openai-whisper's fallback and
no-speech defaults; "one by one" cuts the recording at the sentences' spans and decodes each clip as `encdec
generate` does. Sampling is seeded (0). WER (x100) is over the whole text, as written (no normalisation), the same for every row.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from encdec.audio import SAMPLE_RATE, read_audio
from encdec.evaluation.text_metrics import wer
from encdec.generation.text_generator import TextGenerator
from encdec.runs.open import open_model
from encdec.transcription import Transcriber

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("data", type=Path, help="the speech corpus directory holding long.jsonl")
    parser.add_argument("--index", type=int, default=0, help="which long recording (default 0)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    record = [json.loads(line) for line in (args.data / "long.jsonl").read_text().splitlines()][args.index]
    wave, reference = read_audio(args.data / record["audio"]), [[record["text"]]]
    seconds = len(wave) / SAMPLE_RATE
    opened = open_model(args.model)
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
