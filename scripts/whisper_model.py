"""Build a small Whisper-shaped Hugging Face directory with random weights, for the speech recipe
(configs/recipes/speech_whisper_cpu.yaml) to train from scratch on the speech data script's corpus.

    python scripts/speak.py --out runs/speech_data                                   # the corpus first
    python scripts/whisper_model.py --data runs/speech_data --out runs/whisper_scratch
    python scripts/whisper_model.py --data /tmp/speech --out /tmp/w --vocab-size 300 --limit 200   # a tiny one

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

Written under --out: config.json, generation_config.json, preprocessor_config.json, model.safetensors and the
tokenizer's files.
"""

import argparse
import json
import sys
from pathlib import Path

from encdec.cli.options import whole_number
from encdec.errors import EncdecError
from encdec.safe_paths import output_dir

MAX_TRANSCRIPTS = 10**8  # --limit's most
SPECIALS = [
    "<|startoftranscript|>",
    "<|en|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
]
TIMESTAMPS = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]  # 20 ms apart, as Whisper's
WINDOW_SECONDS = 10
MODEL = dict(
    num_mel_bins=80,
    d_model=256,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    max_source_positions=WINDOW_SECONDS * 50,  # frames of 10 ms, halved by the stem's stride
    max_target_positions=192,  # a transcript of up to ~180 characters, one token each at --vocab-size 300
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    activation_function="gelu",
    scale_embedding=False,
    tie_word_embeddings=True,
)


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


def whisper_tokenizer(texts: list[str], vocab_size: int, work: Path):
    """An English-only WhisperTokenizer: the BPE's pieces, <|endoftext|>, then Whisper's specials and timestamps."""
    import transformers

    vocab, merges = train_bpe(texts, vocab_size)
    (work / "vocab.json").write_text(json.dumps(vocab))
    (work / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    end = "<|endoftext|>"
    tokenizer = transformers.WhisperTokenizer(
        str(work / "vocab.json"), str(work / "merges.txt"), unk_token=end, bos_token=end, eos_token=end, pad_token=end
    )
    tokenizer.add_tokens(SPECIALS, special_tokens=True)
    tokenizer.add_tokens(TIMESTAMPS)
    tokenizer.model_max_length = MODEL["max_target_positions"]
    (work / "vocab.json").unlink()
    (work / "merges.txt").unlink()
    return tokenizer


def generation_config(tokenizer):
    """An English-only Whisper's generation settings, ids from `tokenizer`."""
    import transformers

    ids = dict(zip(SPECIALS, tokenizer.convert_tokens_to_ids(SPECIALS)))
    end = tokenizer.eos_token_id
    return transformers.GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        is_multilingual=False,
        max_initial_timestamp_index=50,
        suppress_tokens=list(ids.values()),  # the prompt's tokens, never a transcript's (openai's SuppressTokens)
        begin_suppress_tokens=[end],
        max_length=MODEL["max_target_positions"],
        return_timestamps=False,
    )


def build(out: Path, texts: list[str], vocab_size: int, seed: int) -> None:
    """The tokenizer, feature extractor and random-weight Whisper saved in `out`."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tokenizer = whisper_tokenizer(texts, vocab_size, out)
    tokenizer.save_pretrained(out)
    transformers.WhisperFeatureExtractor(
        feature_size=MODEL["num_mel_bins"], chunk_length=WINDOW_SECONDS
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
        suppress_tokens=tokenizer.convert_tokens_to_ids(SPECIALS),
        begin_suppress_tokens=[end],
        **MODEL,
    )
    model = transformers.WhisperForConditionalGeneration(config)
    model.generation_config = generation_config(tokenizer)
    model.save_pretrained(out)


def check(out: Path) -> None:
    """The directory reloads as an English-only Whisper's does: <|startoftranscript|> <|notimestamps|> first."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ids = tokenizer("A dog runs.")["input_ids"]
    expected = tokenizer.convert_tokens_to_ids(["<|startoftranscript|>", "<|notimestamps|>"])
    if ids[:2] != expected or ids[-1] != tokenizer.eos_token_id:
        sys.exit(f"{out}'s tokenizer encodes 'A dog runs.' as {ids}, not Whisper's prefix, text and <|endoftext|>")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the speech data script's output (train.jsonl)")
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write")
    parser.add_argument(
        "--vocab-size",
        type=whole_number(300, 50_000, "--vocab-size"),
        default=300,
        help="BPE pieces (default 300: the 256 bytes and 44 merges, nearly letters, which a small model learns to hear "
        "from a few hours sooner than a thousand pieces)",
    )
    parser.add_argument("--seed", type=whole_number(0, 2**31 - 1, "--seed"), default=0, help="weights' seed")
    parser.add_argument(
        "--limit", type=whole_number(1, MAX_TRANSCRIPTS, "--limit"), default=None, help="transcripts the BPE reads"
    )
    try:  # a number out of its range, an output path refused (a link on the way): one sentence
        args = parser.parse_args(argv)
        texts = read_transcripts(args.data, args.limit)  # before anything is written
        out = output_dir(args.out, "--out")
    except EncdecError as error:
        sys.exit(f"whisper_model.py: error: {error}")
    build(out, texts, args.vocab_size, args.seed)
    check(out)
    print(f"wrote {out}: a Whisper of random weights, its tokenizer ({args.vocab_size:,} pieces) and feature extractor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
