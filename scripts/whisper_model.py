"""Build a small Whisper-shaped Hugging Face directory with random weights, for the speech recipe
(configs/recipes/speech_whisper_cpu.yaml) to train from scratch on the speech data script's corpus.

    python scripts/speak.py --out runs/speech_data                                   # the corpus first
    python scripts/whisper_model.py --data runs/speech_data --out runs/whisper_scratch
    python scripts/whisper_model.py --data /tmp/speech --out /tmp/w --vocab-size 300 --limit 200   # a tiny one
    python scripts/whisper_model.py --data runs/speech_data --out runs/whisper_base --shape base \
        --texts ../shared/data/tinystories/tinystories_train_head.txt.gz ../shared/data/lm_other/tinyshakespeare.txt.gz

Why build one: no pretrained weights can be downloaded here, and a Whisper trained by encdec should be a
directory transformers reads as its own (its pipeline, its generate, its feature extractor). This one is:
model_type whisper at a CPU's size (d_model 256, 2 + 2 layers, 4 heads, feed-forward 1024, no dropout), reading 10-second
windows (max_source_positions 500: 1000 log-mel frames, WhisperFeatureExtractor's chunk_length 10; the
corpus's sentences last at most 10 s), with random weights (seeded); an English-only WhisperTokenizer whose
byte-level BPE (GPT-2's, as Whisper's) is trained on the corpus's training transcripts, followed by Whisper's
special tokens in Whisper's order (<|endoftext|>, <|startoftranscript|>, <|en|>, <|translate|>, <|transcribe|>,
<|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, then the 1,501 timestamps <|0.00|> ...
<|30.00|>), so every text token lies below the timestamps as Whisper's decoding expects; and the
generation_config.json of an English-only Whisper (its decoder starts <|startoftranscript|> <|notimestamps|>;
the prompt's tokens are suppressed in a transcript, as openai's decoding suppresses them).
What it can transcribe it learns from the recipe alone: it starts from nothing.

--shape base builds Whisper base's shape and token layout instead (the benchmarks' model, benchmarks/bench_transcribe.py):
d_model 512, 6 + 6 layers, 8 heads, feed-forward 2048, 30-second windows (max_source_positions 1500), 448 decoder
positions, and a multilingual vocabulary of Whisper's 51,865 ids: 50,257 BPE pieces (trained on the transcripts
and the --texts files, which must hold enough words for that many), <|endoftext|>, <|startoftranscript|>, 99
language tokens, the task and prompt tokens, the timestamps; its generation_config.json a multilingual Whisper's
(lang_to_id, task_to_id), so faster-whisper's converter and transformers read it as they read Whisper base.

Written under --out: config.json, generation_config.json, preprocessor_config.json, model.safetensors and the
tokenizer's files.
"""

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from encdec.cli.options import whole_number
from encdec.errors import ConfigError, EncdecError
from encdec.safe_paths import output_dir

MAX_TRANSCRIPTS = 10**8  # --limit's most
START = "<|startoftranscript|>"
TASKS = [
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
]
TIMESTAMPS = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]  # 20 ms apart, as Whisper's
MODEL = dict(
    num_mel_bins=80,
    d_model=256,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    max_source_positions=10 * 50,  # 10-second windows: frames of 10 ms, halved by the stem's stride
    max_target_positions=192,  # a transcript of up to ~180 characters, one token each at --vocab-size 300
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    activation_function="gelu",
    scale_embedding=False,
    tie_word_embeddings=True,
)
BASE = dict(  # Whisper base's shape (openai/whisper-base's config.json)
    MODEL,
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    max_source_positions=30 * 50,
    max_target_positions=448,
)


@dataclass(frozen=True)
class Shape:
    model: dict
    languages: tuple[str, ...]  # ("en",): English-only; more: a multilingual Whisper's language tokens
    pieces: int | None  # the BPE's pieces a shape requires (Whisper's 50,257), or --vocab-size's

    @property
    def window_seconds(self) -> int:
        return self.model["max_source_positions"] // 50

    @property
    def specials(self) -> list[str]:
        """Whisper's special tokens after <|endoftext|>, in Whisper's order."""
        return [START, *(f"<|{code}|>" for code in self.languages), *TASKS]

    @property
    def multilingual(self) -> bool:
        return len(self.languages) > 1


def whisper_languages() -> tuple[str, ...]:
    """Whisper's 99 languages in its token order (transformers' table, whose 100th, yue, is large-v3's)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return tuple(LANGUAGES)[:99]


SHAPES = {"tiny": lambda: Shape(MODEL, ("en",), None), "base": lambda: Shape(BASE, whisper_languages(), 50_257)}


def read_texts(paths: list[Path]) -> list[str]:
    """The lines of each text file (gzip by its suffix), for the BPE beside the transcripts."""
    texts = []
    for path in paths:
        if not path.is_file():
            sys.exit(f"whisper_model.py: error: --texts {path} is not a file")
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8") as lines:
                texts.extend(line.strip() for line in lines if line.strip())
        except (OSError, UnicodeDecodeError, EOFError) as error:
            sys.exit(f"whisper_model.py: error: --texts {path} cannot be read as UTF-8 text ({error})")
    return texts


def read_transcripts(data: Path, limit: int | None) -> list[str]:
    """The transcripts of `data`/train.jsonl (the speech data script's training manifest), the first `limit`."""
    path = data / "train.jsonl"
    if not path.is_file():
        sys.exit(f"{path} does not exist: make the corpus first with scripts/speak.py --out {data}")
    texts = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                texts.append(json.loads(line)["text"])
            except (json.JSONDecodeError, KeyError, TypeError):
                sys.exit(f"{path} line {number} is not a JSON object with a text")
            if limit is not None and len(texts) >= limit:
                break
    if not texts:
        sys.exit(f"{path} holds no transcripts")
    return texts


def train_bpe(texts: list[str], vocab_size: int) -> tuple[dict[str, int], list[str]]:
    """(vocab, merges) of a byte-level BPE of `vocab_size` pieces trained on `texts`, <|endoftext|> after them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model["merges"]]
    vocab = dict(model["vocab"])
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def whisper_tokenizer(texts: list[str], vocab_size: int, work: Path, shape: Shape):
    """A WhisperTokenizer: the BPE's pieces, <|endoftext|>, then Whisper's specials and timestamps."""
    import transformers

    vocab, merges = train_bpe(texts, vocab_size)
    if len(vocab) != vocab_size + 1:
        sys.exit(
            f"whisper_model.py: error: the texts make {len(vocab) - 1:,} BPE pieces, not {vocab_size:,}: "
            "give more text with --texts"
        )
    (work / "vocab.json").write_text(json.dumps(vocab))
    (work / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    end = "<|endoftext|>"
    tokenizer = transformers.WhisperTokenizer(
        str(work / "vocab.json"), str(work / "merges.txt"), unk_token=end, bos_token=end, eos_token=end, pad_token=end
    )
    tokenizer.add_tokens(shape.specials, special_tokens=True)
    tokenizer.add_tokens(TIMESTAMPS)
    tokenizer.model_max_length = shape.model["max_target_positions"]
    (work / "vocab.json").unlink()
    (work / "merges.txt").unlink()
    return tokenizer


def generation_config(tokenizer, shape: Shape):
    """An English-only or a multilingual Whisper's generation settings, ids from `tokenizer`."""
    import transformers

    ids = dict(zip(shape.specials, tokenizer.convert_tokens_to_ids(shape.specials)))
    end = tokenizer.eos_token_id
    languages = {f"<|{code}|>": ids[f"<|{code}|>"] for code in shape.languages}
    multilingual = {}
    if shape.multilingual:  # the language and task tokens transformers' generate and faster-whisper read
        task_ids = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
        multilingual = dict(lang_to_id=languages, task_to_id=task_ids)
    suppressed = [token for name, token in ids.items() if not (shape.multilingual and name in languages)]
    return transformers.GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        is_multilingual=shape.multilingual,
        max_initial_timestamp_index=50,
        suppress_tokens=suppressed,  # the prompt's tokens, never a transcript's (openai's SuppressTokens)
        begin_suppress_tokens=[end],
        max_length=shape.model["max_target_positions"],
        return_timestamps=False,
        **multilingual,
    )


def build(out: Path, texts: list[str], vocab_size: int, seed: int, shape: Shape | None = None) -> None:
    """The tokenizer, feature extractor and random-weight Whisper (`shape`, default tiny) saved in `out`."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    shape = shape or SHAPES["tiny"]()
    tokenizer = whisper_tokenizer(texts, vocab_size, out, shape)
    tokenizer.save_pretrained(out)
    transformers.WhisperFeatureExtractor(
        feature_size=shape.model["num_mel_bins"], chunk_length=shape.window_seconds
    ).save_pretrained(out)
    torch.manual_seed(seed)
    end = tokenizer.eos_token_id
    start = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    config = transformers.WhisperConfig(
        vocab_size=len(tokenizer),
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        decoder_start_token_id=start,
        suppress_tokens=tokenizer.convert_tokens_to_ids(shape.specials),
        begin_suppress_tokens=[end],
        **shape.model,
    )
    model = transformers.WhisperForConditionalGeneration(config)
    model.generation_config = generation_config(tokenizer, shape)
    model.save_pretrained(out)


def check(out: Path, shape: Shape) -> None:
    """The directory reloads as a Whisper's does: <|startoftranscript|> (<|en|> <|transcribe|>) <|notimestamps|> first."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    if shape.multilingual:
        tokenizer.set_prefix_tokens(language="en", task="transcribe")
    ids = tokenizer("A dog runs.")["input_ids"]
    prefix = [START, "<|en|>", "<|transcribe|>"] if shape.multilingual else [START]
    expected = tokenizer.convert_tokens_to_ids([*prefix, "<|notimestamps|>"])
    if ids[: len(expected)] != expected or ids[-1] != tokenizer.eos_token_id:
        sys.exit(f"{out}'s tokenizer encodes 'A dog runs.' as {ids}, not Whisper's prefix, text and <|endoftext|>")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the speech data script's output (train.jsonl)")
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write")
    parser.add_argument(
        "--vocab-size",
        type=whole_number(300, 50_257, "--vocab-size"),
        default=None,
        help="BPE pieces (default 300: the 256 bytes and 44 merges, nearly letters, which a small model learns to hear "
        "from a few hours sooner than a thousand pieces; --shape base: Whisper's 50,257)",
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="the model's shape (default tiny)")
    parser.add_argument("--texts", type=Path, nargs="*", default=[], help="text files (.gz or plain) the BPE reads too")
    parser.add_argument("--seed", type=whole_number(0, 2**31 - 1, "--seed"), default=0, help="weights' seed")
    parser.add_argument(
        "--limit", type=whole_number(1, MAX_TRANSCRIPTS, "--limit"), default=None, help="transcripts the BPE reads"
    )
    try:  # a number out of its range, an output path refused (a link on the way): one sentence
        args = parser.parse_args(argv)
        shape = SHAPES[args.shape]()
        pieces = args.vocab_size or shape.pieces or 300
        if shape.pieces and pieces != shape.pieces:
            raise ConfigError(f"--shape {args.shape} has {shape.pieces:,} BPE pieces, as Whisper's: leave --vocab-size")
        texts = read_transcripts(args.data, args.limit) + read_texts(args.texts)  # before anything is written
        out = output_dir(args.out, "--out")
    except EncdecError as error:
        sys.exit(f"whisper_model.py: error: {error}")
    build(out, texts, pieces, args.seed, shape)
    check(out, shape)
    print(f"wrote {out}: a Whisper of random weights, its tokenizer ({pieces:,} pieces) and feature extractor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
