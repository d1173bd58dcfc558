"""Speak thousands of English sentences with espeak-ng into a speech corpus: 16 kHz wav files, jsonl manifests
for train / valid / test splits with held-out sentences, a held-out voice and noise at measured SNRs.

    python scripts/speak.py --out data/speech                                # the speech recipe's corpus
    python scripts/speak.py --out data/speech --long 60,780                  # and a 60 s and a 13 min recording
    python scripts/speak.py --out /tmp/speech --train 20 --valid 4 --test 4 --limit 300   # a tiny one

Why make one: no speech corpus is on this machine and nothing can be downloaded, while apt's espeak-ng (named
in the README beside chromium) speaks any text in English accents (eight here). The sentences are TinyStories'
(its stories split into sentences) and Multi30k's English side, from ../shared/data; those holding a digit or a
character espeak-ng would read aloud otherwise are left out, double quotes are dropped (never spoken), and a
sentence appears in one split only (compared in lower case, letters alone). Each utterance draws a voice (an
accent of `espeak-ng --voices=en` that is installed: espeak-ng's own, and MBROLA's where mbrola is), a variant
(+f1 ... +m3: pitch and formants of another speaker), a rate (--rate-min to --rate-max words a minute) and a
pitch (20-80 of espeak-ng's 0-99), deterministically given --seed. The speech is resampled to 16 kHz by soxr
(encdec.audio.read_audio_bytes) and peak-normalised to half of full scale.

Noise: white (Gaussian) or babble (six of 24 sentences in no split, spoken over each other), scaled to an SNR
drawn from --snrs. The SNR written is the one measured on the 16-bit samples written: 10 log10 of the clean
speech's energy over the energy of (noisy - clean), over the whole clip.

Written under --out (each file whole or not at all; wav files are 16 kHz 16-bit mono):
    SPLIT.jsonl      one utterance a line: {"audio": "SPLIT/000042.wav", "text", "voice", "rate", "pitch",
                     "snr", "noise"}; "snr" and "noise" null for clean speech; "audio" relative to --out
    train            --train sentences, the training voices, --train-noise of them noisy
    valid            --valid other sentences, as train
    test             --test other sentences, the training voices, clean
    test_voice       test's utterances in the held-out voice (--test-voice): the same sentence, variant,
                     rate and pitch in another accent, clean
    test_noisy       test's utterances, each with noise at the next of --snrs, every SNR in white and babble
    long.jsonl       with --long: one recording per length, sentences held out from train joined by pauses
                     (0.3-1.0 s) in one training voice, each line also holding "seconds" and "segments"
                     ({"start", "end", "text"}: where each sentence's speech lies, in seconds)
    speech.json      the settings, the voices and the counts

espeak-ng speaks a sentence in about 10 ms, so one process speaks the default corpus (6,100 utterances, 5.8 hours
of speech; 6.0 hours and 0.7 GB with --long 60,780) in 2 to 3.5 minutes here; a second process would take a
core from training on a two-core machine, so there is none.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import soundfile

from encdec.audio import SAMPLE_RATE, read_audio_bytes
from encdec.cli.options import whole_number
from encdec.errors import EncdecError
from encdec.safe_paths import output_dir, output_path, write_atomic
from encdec.schema import Range, argument_type

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SOURCES = (  # (file below --data, how its sentences are read)
    ("tinystories/tinystories_train_head.txt.gz", "stories"),
    ("tinystories/tinystories_valid_head.txt.gz", "stories"),
    ("translation/multi30k/train.en.gz", "lines"),
    ("translation/multi30k/val.en.gz", "lines"),
)
MAX_UTTERANCES = 1_000_000  # --train, --valid, --test: far above what the sources hold
VARIANTS = ("", "+f1", "+f2", "+f3", "+f4", "+m1", "+m2", "+m3")  # espeak-ng's speaker variants
HELD_OUT_VOICE = "en-gb-scotland"  # --test-voice's default: an accent none of the training voices shares
SPOKEN = re.compile(r"[A-Za-z][A-Za-z ,.;:!?'-]*")  # what a kept sentence holds: letters and punctuation read as such
SENTENCE_END = re.compile(r'(?<=[.!?])["\u201d]?\s+')
MIN_WORDS, MAX_WORDS, MAX_CHARS = 3, 24, 140  # a sentence spoken in about 1 to 10 s
PEAK = 0.5  # every clean utterance's peak, so noise at 0 dB rarely clips
BABBLE_TALKERS, BABBLE_POOL = 6, 24
PAUSE = (0.3, 1.0)  # seconds of silence between a long recording's sentences
SNRS = list[Annotated[float, Range(-10, 60)]]
SECONDS = list[Annotated[float, Range(5, 7200)]]


def kept(sentence: str) -> str | None:
    """`sentence` with double quotes dropped and whitespace made single spaces, where espeak-ng reads it as
    written and it is neither too short nor too long; else None."""
    for quote in ('"', "\u201c", "\u201d"):
        sentence = sentence.replace(quote, "")
    sentence = " ".join(sentence.replace("\u2019", "'").split())
    words = len(sentence.split())
    if SPOKEN.fullmatch(sentence) and MIN_WORDS <= words <= MAX_WORDS and len(sentence) <= MAX_CHARS:
        return sentence
    return None


def sentences_of(line: str, kind: str) -> list[str]:
    """The kept sentences of a line: a story's paragraph split after . ! or ?, a caption whole."""
    pieces = SENTENCE_END.split(line) if kind == "stories" else [line]
    return [sentence for sentence in map(kept, pieces) if sentence]


def read_sentences(data: Path, limit: int | None) -> list[str]:
    """Every source's sentences (the first `limit` of each), each once: the same words in another case or with
    other punctuation count as the same sentence."""
    found, seen = [], set()
    for name, kind in SOURCES:
        path = data / name
        if not path.is_file():
            sys.exit(f"speak.py: error: {path} is missing; --data must hold ../shared/data's TinyStories and Multi30k")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = [line for line in f.read().splitlines() if line.strip() and line.strip() != "<|endoftext|>"]
        sentences = [sentence for line in lines for sentence in sentences_of(line, kind)]
        for sentence in sentences[:limit]:
            key = " ".join(re.sub(r"[^a-z ]", "", sentence.lower()).split())
            if key not in seen:
                seen.add(key)
                found.append(sentence)
    return found


def installed_voices() -> list[str]:
    """The English voices of `espeak-ng --voices=en` that speak here: espeak-ng's own, MBROLA's where mbrola is
    installed (without it espeak-ng falls back to another voice under the MBROLA voice's name)."""
    listed = subprocess.run(["espeak-ng", "--voices=en"], capture_output=True, text=True, check=True).stdout
    voices = []
    for row in listed.splitlines()[1:]:
        parts = row.split()
        if len(parts) < 5 or parts[1] == "variant" or parts[1] in voices:
            continue
        if parts[4].startswith("mb/") and shutil.which("mbrola") is None:
            continue
        if speak_raw("one", parts[1], 175, 50) is not None:
            voices.append(parts[1])
    return voices


def speak_raw(text: str, voice: str, rate: int, pitch: int) -> bytes | None:
    """The wav bytes espeak-ng speaks `text` in (text on stdin, so none is read as an option); None on failure."""
    command = ["espeak-ng", "-v", voice, "-s", str(rate), "-p", str(pitch), "--stdout"]
    done = subprocess.run(command, input=text.encode(), capture_output=True, timeout=60)
    return done.stdout if done.returncode == 0 and len(done.stdout) > 44 else None


def speak(text: str, voice: str, rate: int, pitch: int) -> np.ndarray:
    """`text` spoken at 16 kHz, float32, peak-normalised to PEAK."""
    spoken = speak_raw(text, voice, rate, pitch)
    if spoken is None:
        sys.exit(f"speak.py: error: espeak-ng could not speak {text!r} in voice {voice}")
    wave = read_audio_bytes(spoken, name=f"espeak-ng's speech of {text[:40]!r}").numpy()
    return wave * (PEAK / max(float(np.abs(wave).max()), 1e-6))


def quantized(wave: np.ndarray) -> np.ndarray:
    """`wave` as the 16-bit samples a wav file holds."""
    return np.round(np.clip(wave, -1.0, 1.0) * 32767).astype(np.int16)


def measured_snr(clean: np.ndarray, noisy: np.ndarray) -> float:
    """10 log10(energy of clean / energy of noisy - clean), both as written."""
    clean, noise = clean.astype(np.float64), noisy.astype(np.float64) - clean
    return round(10 * np.log10(np.sum(clean**2) / max(np.sum(noise**2), 1e-12)), 2)


def noise_of(kind: str, length: int, rng: np.random.Generator, babble: list[np.ndarray]) -> np.ndarray:
    """`length` samples of white noise or of babble (BABBLE_TALKERS sentences at equal levels, each from a
    random point and wrapped around), at unit power."""
    if kind == "white":
        noise = rng.standard_normal(length)
    else:
        noise = np.zeros(length)
        for i in rng.choice(len(babble), size=min(BABBLE_TALKERS, len(babble)), replace=False):
            talker = np.roll(np.resize(babble[i], length), -int(rng.integers(len(babble[i]))))
            noise += talker / np.sqrt(np.mean(talker**2))
    return noise / np.sqrt(np.mean(noise**2))


def with_noise(clean: np.ndarray, snr: float, noise: np.ndarray) -> np.ndarray:
    """`clean` (float) plus `noise` scaled so that the clean energy over the noise energy is `snr` dB."""
    scale = np.sqrt(np.mean(clean.astype(np.float64) ** 2) / 10 ** (snr / 10))
    return clean + scale * noise


class Corpus:
    """The wav files and manifest lines written under `out`, split by split."""

    def __init__(self, out: Path):
        self.out, self.lines = out, {}

    def write(self, split: str, samples: np.ndarray, **fields) -> None:
        folder = output_dir(self.out / split, "--out")
        rows = self.lines.setdefault(split, [])
        name = f"{split}/{len(rows):06d}.wav"
        buffer = io.BytesIO()
        soundfile.write(buffer, samples, SAMPLE_RATE, subtype="PCM_16", format="WAV")
        write_atomic(folder / name.split("/")[1], buffer.getvalue())
        rows.append(json.dumps({"audio": name, **fields}, ensure_ascii=False))

    def finish(self, settings: dict) -> None:
        for split, rows in self.lines.items():
            write_atomic(self.out / f"{split}.jsonl", "".join(row + "\n" for row in rows))
        counts = {split: len(rows) for split, rows in self.lines.items()}
        write_atomic(self.out / "speech.json", json.dumps({**settings, "counts": counts}, indent=2) + "\n")


def drawn_speaker(rng: np.random.Generator, voices: list[str], args: argparse.Namespace) -> tuple[str, int, int]:
    """(voice with a variant, rate, pitch) drawn for one utterance."""
    voice = voices[int(rng.integers(len(voices)))] + VARIANTS[int(rng.integers(len(VARIANTS)))]
    return voice, int(rng.integers(args.rate_min, args.rate_max + 1)), int(rng.integers(20, 81))


def speak_split(corpus, split, sentences, voices, args, rng, babble, noisy_fraction: float) -> None:
    """`sentences` spoken in `voices`, `noisy_fraction` of them with noise, written as `split`."""
    for text in sentences:
        voice, rate, pitch = drawn_speaker(rng, voices, args)
        clean = speak(text, voice, rate, pitch)
        fields = dict(text=text, voice=voice, rate=rate, pitch=pitch, snr=None, noise=None)
        if rng.random() < noisy_fraction:
            kind, snr = args.noise[int(rng.integers(len(args.noise)))], args.snrs[int(rng.integers(len(args.snrs)))]
            noisy = quantized(with_noise(clean, snr, noise_of(kind, len(clean), rng, babble)))
            corpus.write(split, noisy, **{**fields, "snr": measured_snr(quantized(clean), noisy), "noise": kind})
        else:
            corpus.write(split, quantized(clean), **fields)


def speak_test(corpus, sentences, voices, held_out, args, rng, babble) -> None:
    """test (clean), test_noisy (test's utterances with noise) and test_voice (test's in the held-out voice)."""
    for i, text in enumerate(sentences):
        voice, rate, pitch = drawn_speaker(rng, voices, args)
        clean = quantized(speak(text, voice, rate, pitch))
        fields = dict(text=text, voice=voice, rate=rate, pitch=pitch, snr=None, noise=None)
        corpus.write("test", clean, **fields)
        kind, snr = args.noise[i // len(args.snrs) % len(args.noise)], args.snrs[i % len(args.snrs)]  # every pair
        noisy = quantized(with_noise(clean / 32767, snr, noise_of(kind, len(clean), rng, babble)))
        corpus.write("test_noisy", noisy, **{**fields, "snr": measured_snr(clean, noisy), "noise": kind})
        _, plus, variant = voice.partition("+")
        voice = held_out + plus + variant  # the same variant, rate and pitch in another accent
        corpus.write("test_voice", quantized(speak(text, voice, rate, pitch)), **{**fields, "voice": voice})


def speak_long(corpus, seconds: float, sentences: list[str], voice: str, rng) -> int:
    """One recording of `seconds` at least: sentences (each trimmed to its speech) joined by pauses; how many
    sentences it used."""
    pieces, segments, at = [], [], 0
    rate, pitch = int(rng.integers(150, 181)), int(rng.integers(35, 66))
    while at < seconds * SAMPLE_RATE:
        if len(segments) == len(sentences):
            sys.exit(f"speak.py: error: too few sentences held out from train for {seconds:g} s; raise --limit")
        if pieces:  # a pause before every sentence but the first
            pieces.append(np.zeros(int(rng.uniform(*PAUSE) * SAMPLE_RATE), np.float32))
            at += len(pieces[-1])
        text = sentences[len(segments)]
        wave = speak(text, voice, rate, pitch)
        loud = np.flatnonzero(np.abs(wave) > 0.01 * PEAK)
        pieces.append(wave[loud[0] : loud[-1] + 1])  # espeak-ng's silence before and after cut off
        start, at = at, at + len(pieces[-1])
        segments.append({"start": round(start / SAMPLE_RATE, 3), "end": round(at / SAMPLE_RATE, 3), "text": text})
    samples = np.concatenate(pieces)
    text = " ".join(segment["text"] for segment in segments)
    fields = dict(text=text, voice=voice, rate=rate, pitch=pitch, snr=None, noise=None)
    corpus.write("long", quantized(samples), **fields, seconds=round(len(samples) / SAMPLE_RATE, 3), segments=segments)
    return len(segments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the wav files and manifests are written")
    parser.add_argument("--data", type=Path, default=SHARED, help=f"the shared data folder (default {SHARED})")
    for flag, default in (("--train", 5000), ("--valid", 200), ("--test", 300)):
        number = whole_number(0, MAX_UTTERANCES, flag)
        parser.add_argument(flag, type=number, default=default, help=f"utterances of sentences of its own ({default})")
    parser.add_argument("--test-voice", default=HELD_OUT_VOICE, help=f"the held-out voice (default {HELD_OUT_VOICE})")
    parser.add_argument("--snrs", type=argument_type(SNRS, "--snrs"), default=[20.0, 10.0, 5.0, 0.0], help="dB")
    parser.add_argument("--noise", choices=("white", "babble", "both"), default="both", help="the noise kinds")
    parser.add_argument(
        "--train-noise",
        type=argument_type(Annotated[float, Range(0, 1)], "--train-noise"),
        default=0.5,
        help="the fraction of train and valid utterances with noise (default 0.5)",
    )
    parser.add_argument("--rate-min", type=whole_number(80, 450, "--rate-min"), default=130, help="words a minute")
    parser.add_argument("--rate-max", type=whole_number(80, 450, "--rate-max"), default=190, help="words a minute")
    parser.add_argument("--long", type=argument_type(SECONDS, "--long"), default=[], help="seconds, e.g. 60,780")
    parser.add_argument("--seed", type=whole_number(0, 2**63 - 1, "--seed"), default=0, help="every draw's seed")
    parser.add_argument("--limit", type=whole_number(1, 10**8, "--limit"), help="the first N sentences of each source")
    try:
        args = parser.parse_args(argv)
        if args.rate_min > args.rate_max:
            parser.error(f"--rate-min {args.rate_min} is above --rate-max {args.rate_max}")
        return build(args)
    except EncdecError as error:  # a number out of its range, an output path refused (a link on the way)
        sys.exit(f"speak.py: error: {error}")


def build(args: argparse.Namespace) -> int:
    output_path(args.out, "--out")  # a link on the way refused before anything is read or spoken
    if shutil.which("espeak-ng") is None:
        sys.exit("speak.py: error: espeak-ng is not installed; apt install espeak-ng (README, Requirements)")
    voices = installed_voices()
    if args.test_voice not in voices:
        sys.exit(f"speak.py: error: --test-voice {args.test_voice} is not an installed voice: {', '.join(voices)}")
    train_voices = [voice for voice in voices if voice != args.test_voice]
    if not train_voices:
        sys.exit("speak.py: error: espeak-ng has no English voice besides --test-voice to train with")
    args.noise = ["white", "babble"] if args.noise == "both" else [args.noise]
    sentences = read_sentences(args.data, args.limit)
    np.random.default_rng(args.seed).shuffle(sentences)
    wanted = args.test + args.valid + BABBLE_POOL + args.train
    if wanted > len(sentences):
        sys.exit(f"speak.py: error: {wanted:,} sentences are needed but the sources hold {len(sentences):,}")
    test, valid = sentences[: args.test], sentences[args.test : args.test + args.valid]
    babble_texts = sentences[args.test + args.valid : args.test + args.valid + BABBLE_POOL]
    train, rest = sentences[wanted - args.train : wanted], sentences[wanted:]
    corpus = Corpus(output_dir(args.out, "--out"))
    rng = np.random.default_rng([args.seed, 1])
    babble = [speak(text, *drawn_speaker(rng, train_voices, args)) for text in babble_texts if "babble" in args.noise]
    speak_test(corpus, test, train_voices, args.test_voice, args, np.random.default_rng([args.seed, 2]), babble)
    speak_split(
        corpus, "valid", valid, train_voices, args, np.random.default_rng([args.seed, 3]), babble, args.train_noise
    )
    speak_split(
        corpus, "train", train, train_voices, args, np.random.default_rng([args.seed, 4]), babble, args.train_noise
    )
    long_rng = np.random.default_rng([args.seed, 5])
    for seconds in args.long:
        rest = rest[speak_long(corpus, seconds, rest, train_voices[0], long_rng) :]
    settings = {key: value for key, value in vars(args).items() if key not in ("out", "data")}
    corpus.finish({**settings, "voices": train_voices, "test_voice": args.test_voice, "variants": list(VARIANTS)})
    counts = ", ".join(f"{split} {len(rows):,}" for split, rows in corpus.lines.items())
    print(f"{args.out}: {counts} utterances; voices {', '.join(train_voices)}; held out {args.test_voice}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
