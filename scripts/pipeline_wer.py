"""Transcribe a speech manifest with transformers' own ASR pipeline and score it as `encdec evaluate` scores it:
the check that an exported Whisper hears in transformers what it heard in encdec.

    encdec export runs/speech --out hf/speech
    encdec evaluate runs/speech --data runs/speech_data/test.jsonl --format speech-jsonl
    python scripts/pipeline_wer.py hf/speech runs/speech_data/test.jsonl --predictions runs/speech/eval/test/predictions.jsonl

Each recording is read as encdec reads it (encdec.audio.read_audio: 16 kHz by soxr) and handed to
`pipeline("automatic-speech-recognition", model=DIR)` as an array, greedy by default (the pipeline would take
five beams of its own accord: --num-beams says how many, as `encdec evaluate --num-beams` does). It prints the
pipeline's WER and CER (encdec.evaluation: jiwer's corpus rates) and, given encdec's predictions.jsonl, how many
transcripts are the same text and encdec's own WER beside.
"""

import argparse
import json
import sys
from pathlib import Path

from encdec.cli.options import whole_number
from encdec.errors import EncdecError


def transcribe(model: Path, recordings: list[str], beams: int, max_new_tokens: int, batch_size: int) -> list[str]:
    """The pipeline's transcript of each recording, stripped."""
    import transformers

    from encdec.audio import read_audio

    transformers.utils.logging.set_verbosity_error()
    asr = transformers.pipeline("automatic-speech-recognition", model=str(model))
    options = {"num_beams": beams, "max_new_tokens": max_new_tokens}
    texts = []
    for start in range(0, len(recordings), batch_size):
        waves = [
            {"raw": read_audio(r).numpy(), "sampling_rate": 16_000} for r in recordings[start : start + batch_size]
        ]
        texts += [result["text"].strip() for result in asr(waves, generate_kwargs=options, batch_size=batch_size)]
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a Hugging Face Whisper directory (an encdec export)")
    parser.add_argument("manifest", type=Path, help="a speech-jsonl manifest (scripts/speak.py's test.jsonl)")
    parser.add_argument("--predictions", type=Path, help="encdec evaluate's predictions.jsonl of the same manifest")
    parser.add_argument("--num-beams", type=whole_number(1, 16, "--num-beams"), default=1)
    parser.add_argument("--max-new-tokens", type=whole_number(1, 448, "--max-new-tokens"), default=64)  # evaluate's
    parser.add_argument("--batch-size", type=whole_number(1, 256, "--batch-size"), default=16)
    try:
        from encdec.data.formats import read_corpus
        from encdec.evaluation import cer, wer

        args = parser.parse_args(argv)
        pairs = list(read_corpus("speech-jsonl", [args.manifest]))
        recordings, references = [r for r, _ in pairs], [t for _, t in pairs]
        heard = transcribe(args.model, recordings, args.num_beams, args.max_new_tokens, args.batch_size)
        print(
            f"transformers' pipeline: WER {wer(heard, references):.2f}, CER {cer(heard, references):.2f} "
            f"over {len(pairs):,} recordings"
        )
        if args.predictions is not None:
            try:
                lines = args.predictions.read_text(encoding="utf-8").splitlines()
                ours = [json.loads(line)["prediction"] for line in lines]
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
                sys.exit(f"pipeline_wer.py: error: {args.predictions} is not encdec evaluate's predictions ({error})")
            if len(ours) != len(heard):
                sys.exit(f"pipeline_wer.py: error: {args.predictions} holds {len(ours)} predictions, not {len(heard)}")
            same = sum(a == b for a, b in zip(ours, heard))
            print(
                f"encdec evaluate:        WER {wer(ours, references):.2f}, CER {cer(ours, references):.2f}; "
                f"{same:,} of {len(heard):,} transcripts the same text"
            )
    except EncdecError as error:  # a bad flag, manifest or recording: one sentence
        sys.exit(f"pipeline_wer.py: error: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
