"""Long-form transcription beside faster-whisper and transformers: the same Whisper weights, each engine in a process
of its own, real-time factor (audio seconds per wall second) on the speech data script's long recordings.

    python scripts/speak.py --out runs/speech_data --long 60,780                    # the recordings (60 s, 13 min)
    python scripts/whisper_model.py --data runs/speech_data --out runs/whisper_base --shape base --texts \\
        ../shared/data/tinystories/tinystories_train_head.txt.gz ../shared/data/lm_other/tinyshakespeare.txt.gz \\
        ../shared/data/translation/multi30k/train.de.gz                                # Whisper base's shape
    ct2-transformers-converter --model runs/whisper_base --output_dir runs/whisper_base_ct2 \\
        --copy_files tokenizer.json preprocessor_config.json                          # faster-whisper's copy
    python benchmarks/bench_transcribe.py runs/whisper_base runs/whisper_base_ct2 \\
        runs/speech_data/long/000000.wav runs/speech_data/long/000001.wav --threads 2

What every engine runs: the recording read from its file, cut into the model's windows (30 s) back to back (no timestamp
tokens: faster-whisper's `without_timestamps`, encdec transcribe's --without-timestamps), each window decoded
after <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|> with no previous text and no temperature
fallback, greedy or beam 5, at most --max-new-tokens tokens. The model's weights are random (Whisper base's
shape and vocabulary of 51,865), so it writes its --max-new-tokens in every window: 96 by default, about what
Whisper writes for 30 s of speech at 150 words a minute, so every engine does the same work (the tokens column
says so). The engines:
    encdec          encdec.transcription.Transcriber on open_model's model, a recording's windows --batch-size
                    at a time (window_batch); int8: encdec.quantization.quantize; bf16: the weights in bf16
                    (what `encdec transcribe` decodes in on a CPU that multiplies bf16 natively)
    encdec-sequential  the same, window after window (window_batch=1)
    faster-whisper  WhisperModel(compute_type float32, int8, or bfloat16 where this CPU's CTranslate2 has
                    it).transcribe, VAD off, suppress_blank off (the model's generation config suppresses only
                    <|endoftext|> first)
    faster-whisper-batched  BatchedInferencePipeline.transcribe over the same windows (clip_timestamps),
                    --batch-size at a time
    transformers    WhisperForConditionalGeneration.generate on each window's WhisperFeatureExtractor features,
                    fp32 or bf16 (transformers has no int8 for a CPU of its own)
    transformers-batched  the same generate on --batch-size windows' features at once
Each row runs --repeats times, the engines interleaved, each run in a fresh process after a warm-up on the
recording's first windows, as many as the timed run decodes at once (--batch-size for the batched engines, one for
the others); the figure is the median. The model's load is not timed; reading the audio is.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CT2_COMPUTE = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16"}  # --compute in CTranslate2's names
ENGINES = (
    "encdec",
    "encdec-sequential",
    "faster-whisper",
    "faster-whisper-batched",
    "transformers",
    "transformers-batched",
)


def window_samples(model: Path) -> int:
    """The model's window in samples at 16 kHz: 2 x max_source_positions frames of 10 ms (Whisper's 30 s)."""
    return json.loads((model / "config.json").read_text())["max_source_positions"] * 2 * 160


BATCHED = ("encdec", "faster-whisper-batched", "transformers-batched")  # a recording's windows --batch-size at a time


def warm_up_samples(args) -> int:
    """The samples of the recording a warm-up reads: as many windows as the timed run decodes at once (--batch-size
    for the batched engines, one for the others), so each engine has met the shapes it is timed on (encdec's oneDNN
    copy of a weight is made at its first product by more than one row; CTranslate2 packs its weights at load)."""
    return window_samples(args.model) * (args.batch_size if args.engine in BATCHED else 1)


def worker(args) -> dict:
    """One engine's transcription of args.audio, timed after a warm-up: {"seconds", "tokens", "windows"}."""
    transcribe = {
        "encdec": encdec_engine,
        "encdec-sequential": encdec_engine,
        "faster-whisper": faster_whisper_engine,
        "faster-whisper-batched": faster_whisper_batched_engine,
        "transformers": hf_engine,
        "transformers-batched": hf_engine,
    }
    run = transcribe[args.engine](args)
    run(args.audio, warm_up=True)
    start = time.perf_counter()
    tokens, windows = run(args.audio, warm_up=False)
    return {"seconds": time.perf_counter() - start, "tokens": tokens, "windows": windows}


def language_of(model: Path) -> dict:
    """English, transcribed: named for a multilingual Whisper; an English-only one takes neither option."""
    generation = json.loads((model / "generation_config.json").read_text())
    return {"language": "en", "task": "transcribe"} if generation.get("is_multilingual") else {}


def encdec_engine(args):
    import torch

    from encdec.quantization import quantize
    from encdec.runs.open import open_model
    from encdec.transcription import Transcriber

    torch.set_num_threads(args.threads)
    opened = open_model(args.model, dtype="bf16" if args.compute == "bf16" else None)
    model = quantize(opened.model, "int8") if args.compute == "int8" else opened.model
    transcriber = Transcriber(
        model.eval(),
        opened.text,
        **language_of(args.model),
        num_beams=args.beams,
        max_new_tokens=args.max_new_tokens,
        return_timestamps=False,
        window_batch=1 if args.engine == "encdec-sequential" else args.batch_size,
    )

    def run(audio: Path, warm_up: bool):
        from encdec.audio import read_audio

        wave = read_audio(audio)
        [transcript] = transcriber([wave[: warm_up_samples(args)] if warm_up else wave])
        return sum(len(s.tokens) for s in transcript.segments), len(transcript.segments)

    return run


def faster_whisper_engine(args):
    from faster_whisper import WhisperModel

    compute = CT2_COMPUTE[args.compute]
    model = WhisperModel(str(args.ct2), device="cpu", compute_type=compute, cpu_threads=args.threads, num_workers=1)

    def run(audio: Path, warm_up: bool):
        from faster_whisper.audio import decode_audio

        wave = decode_audio(str(audio))
        segments, _ = model.transcribe(
            wave[: warm_up_samples(args)] if warm_up else wave,
            condition_on_previous_text=False,
            **faster_whisper_options(args),
        )
        segments = list(segments)  # the decoding happens as the generator is read
        return sum(len(s.tokens) for s in segments), len(segments)

    return run


def faster_whisper_options(args) -> dict:
    """What both of faster-whisper's modes are asked: English, the search, no timestamps, VAD, fallback or
    no-speech test, suppress_blank off (the model's generation config suppresses only <|endoftext|> first)."""
    return dict(
        language="en",
        task="transcribe",
        beam_size=args.beams,
        best_of=1,
        temperature=0.0,
        without_timestamps=True,
        vad_filter=False,
        suppress_blank=False,
        compression_ratio_threshold=None,
        log_prob_threshold=None,
        no_speech_threshold=None,
        max_new_tokens=ct2_max_new_tokens(args.max_new_tokens),
    )


def faster_whisper_batched_engine(args):
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    compute = CT2_COMPUTE[args.compute]
    model = WhisperModel(str(args.ct2), device="cpu", compute_type=compute, cpu_threads=args.threads, num_workers=1)
    pipeline, window = BatchedInferencePipeline(model), window_samples(args.model)

    def run(audio: Path, warm_up: bool):
        from faster_whisper.audio import decode_audio

        wave = decode_audio(str(audio))
        wave = wave[: warm_up_samples(args)] if warm_up else wave
        clips = [  # the windows back to back, as the other engines cut them (no VAD)
            {"start": start / 16_000, "end": min(start + window, len(wave)) / 16_000}
            for start in range(0, len(wave), window)
        ]
        segments, _ = pipeline.transcribe(
            wave, clip_timestamps=clips, batch_size=args.batch_size, **faster_whisper_options(args)
        )
        segments = list(segments)
        return sum(len(s.tokens) for s in segments), len(segments)

    return run


def ct2_max_new_tokens(wanted: int) -> int:
    """faster-whisper's max_new_tokens that writes `wanted` tokens: it asks CTranslate2 for max_length = the prompt's
    4 tokens + max_new_tokens, of which CTranslate2 4.8's Whisper writes half (its sequences_ids: max_length 20 ->
    10 ids, 448 -> 224, checked on this model), the last of them dropped by faster-whisper."""
    return 2 * (wanted + 1) - 4


def hf_engine(args):
    import soundfile
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.compute == "bf16" else torch.float32
    model = transformers.WhisperForConditionalGeneration.from_pretrained(args.model, dtype=dtype).eval()
    extractor = transformers.WhisperFeatureExtractor.from_pretrained(args.model)
    window = window_samples(args.model)
    batch = args.batch_size if args.engine == "transformers-batched" else 1
    prompt = 4 if language_of(args.model) else 2  # <|startoftranscript|> (<|en|> <|transcribe|>) <|notimestamps|>
    pad = model.generation_config.pad_token_id
    pad = model.generation_config.eos_token_id if pad is None else pad

    def run(audio: Path, warm_up: bool):
        wave, _ = soundfile.read(audio, dtype="float32")
        starts = range(0, min(warm_up_samples(args), len(wave)) if warm_up else len(wave), window)
        tokens = 0
        for first in range(0, len(starts), batch):  # `batch` windows a generate
            pieces = [wave[start : start + window] for start in starts[first : first + batch]]
            features = extractor(pieces, sampling_rate=16_000, return_tensors="pt")
            with torch.inference_mode():
                out = model.generate(
                    features.input_features.to(dtype),
                    **language_of(args.model),
                    return_timestamps=False,
                    num_beams=args.beams,
                    max_new_tokens=args.max_new_tokens,
                )
            written = out[:, prompt:]
            tokens += int(((written != model.generation_config.eos_token_id) & (written != pad)).sum())
        return tokens, len(starts)

    return run


def runs_in(engine: str, compute: str) -> bool:
    """Whether `engine` has `compute` on this CPU: transformers no int8 of its own, CTranslate2 bfloat16 only where
    its build offers it on this CPU (4.8.5 offered it neither on the AMD EPYC nor on the Xeon with AMX measured)."""
    if engine.startswith("transformers"):
        return compute != "int8"
    if engine.startswith("faster-whisper") and compute == "bf16":
        import ctranslate2

        return "bfloat16" in ctranslate2.get_supported_compute_types("cpu")
    return True


def measure(args, engine: str, audio: Path, beams: int, compute: str) -> dict | str:
    """One run of `engine` in a process of its own: its figures, or why it failed (its last line)."""
    command = [sys.executable, __file__, str(args.model), str(args.ct2), str(audio), "--worker", engine]
    command += ["--beams", str(beams), "--compute", compute, "--threads", str(args.threads)]
    command += ["--max-new-tokens", str(args.max_new_tokens), "--batch-size", str(args.batch_size)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:120]
    return json.loads(done.stdout.strip().splitlines()[-1])


def seconds_of(audio: Path) -> float:
    import soundfile

    info = soundfile.info(audio)
    return info.frames / info.samplerate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a Hugging Face Whisper directory (scripts/whisper_model.py)")
    parser.add_argument("ct2", type=Path, help="the same model converted by ct2-transformers-converter")
    parser.add_argument("audio", type=Path, nargs="+", help="recordings (scripts/speak.py --long)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each row (default 3); 1 past 5 minutes")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=8, help="windows a batch for the batched engines (8)")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--compute", nargs="+", default=["fp32", "int8"], choices=list(CT2_COMPUTE))
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)  # one engine's run, in this process
    args = parser.parse_args(argv)
    if args.worker:
        args.engine, args.audio, args.beams, args.compute = args.worker, args.audio[0], args.beams[0], args.compute[0]
        print(json.dumps(worker(args)))
        return
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if "Model name" in line), "?")
    print(f"CPU: {model_name}, {args.threads} threads; {args.max_new_tokens} tokens a window at most")
    print(
        "| recording | search | weights | engine | tokens | windows | wall s | audio s / wall s | vs faster-whisper |"
    )
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for audio in args.audio:
        seconds = seconds_of(audio)
        repeats = args.repeats if seconds <= 300 else 1
        for beams in args.beams:
            for compute in args.compute:
                engines = [e for e in args.engines if runs_in(e, compute)]
                runs = {engine: [] for engine in engines}
                for _ in range(repeats):  # interleaved
                    for engine in engines:
                        runs[engine].append(measure(args, engine, audio, beams, compute))
                walls = {}
                for engine, results in runs.items():
                    failed = next((r for r in results if isinstance(r, str)), None)
                    if failed:
                        print(f"| {audio.name} | {beams} | {compute} | {engine} | {failed} | | | | |")
                        continue
                    walls[engine] = statistics.median(r["seconds"] for r in results)
                for engine, wall in walls.items():
                    first = runs[engine][0]
                    against = walls.get("faster-whisper")
                    ratio = f"{against / wall:.2f}x" if against else "-"
                    search = "greedy" if beams == 1 else f"beam {beams}"
                    print(
                        f"| {audio.name} ({seconds:.0f} s) | {search} | {compute} | {engine} | {first['tokens']} | "
                        f"{first['windows']} | {wall:.1f} | {seconds / wall:.1f} | {ratio} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
