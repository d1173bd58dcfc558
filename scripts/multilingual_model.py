"""Build a small NLLB-shaped Hugging Face directory with random weights, and the English-German TSV files of
the multilingual recipe (configs/recipes/multilingual_nllb.yaml), from Multi30k alone.

    python scripts/multilingual_model.py --out runs/nllb_small          # runs/nllb_small/{model,data}
    python scripts/multilingual_model.py --out /tmp/nllb --limit 300 --vocab-size 400   # a tiny one

Why build one: no pretrained weights can be downloaded here, and a newcomer who fine-tunes NLLB, M2M100 or
mBART needs a directory laid out as theirs is. This one is: model_type m2m_100 (NLLB's architecture: pre-norm,
fairseq's sinusoidal positions, scaled and tied embeddings, decoder_start_token_id 2 = </s>) at the size of
configs/recipes/multi30k_en_de.yaml's model (d_model 256, 4 + 4 layers, 4 heads, feed-forward 1024, dropout
0.1), with random weights (seeded); and an NllbTokenizer whose BPE (`tokenizers`, Metaspace as NLLB's) is
trained on the English and German training text, with a few of NLLB's language codes (eng_Latn, deu_Latn,
fra_Latn, ...) after it as NLLB has them. `AutoTokenizer.from_pretrained(OUT/model, src_lang="deu_Latn")`
encodes "Ein Hund" as [deu_Latn, pieces..., </s>], NLLB's own layout. What it can translate it learns from the
recipe's fine-tuning alone: it starts from nothing.

Written under --out:
    model/                 config.json, generation_config.json, model.safetensors, the tokenizer's files
    data/SPLIT_en-de.tsv   English<TAB>German, line i of Multi30k's SPLIT.en with line i of SPLIT.de
    data/SPLIT_de-en.tsv   the same pairs the other way round
for SPLIT train, validation (Multi30k's val) and test (test_2016_flickr), those whose files exist (each file's
name up to its first dot is its own: `encdec evaluate RUN --data FILE` reports in RUN/eval/<that name>). Every
whitespace run in a sentence (Multi30k's German has one tab and some no-break spaces) becomes one space, so
no text holds the tab that separates the columns (NLLB's own normalizer maps those spaces alike).
"""

import argparse
import gzip
import json
import sys
from pathlib import Path

from encdec.cli.options import whole_number
from encdec.errors import EncdecError
from encdec.safe_paths import output_dir, write_atomic
from encdec.tokenizers.base import MAX_VOCAB

ROOT = Path(__file__).resolve().parents[1]
MAX_PAIRS = 10**8  # --limit's most: far above Multi30k's 29,000
MULTI30K = ROOT.parent / "shared" / "data" / "translation" / "multi30k"
SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}  # TSV name -> Multi30k's
LANGUAGES = {"en": "eng_Latn", "de": "deu_Latn"}  # the recipe's two, NLLB's codes
CODES = ["eng_Latn", "deu_Latn", "fra_Latn", "spa_Latn", "ita_Latn", "nld_Latn"]  # as NLLB orders none: a few
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's dictionary: ids 0-3, as NLLB's
MODEL = dict(  # configs/recipes/multi30k_en_de.yaml's size, NLLB's layout
    d_model=256,
    encoder_layers=4,
    decoder_layers=4,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.0,
    activation_function="relu",
    max_position_embeddings=256,
    scale_embedding=True,
    tie_word_embeddings=True,
    encoder_layerdrop=0.0,
    decoder_layerdrop=0.0,
    bos_token_id=0,
    pad_token_id=1,
    eos_token_id=2,
    decoder_start_token_id=2,
    tokenizer_class="NllbTokenizer",
)


def clean(line: str) -> str:
    """A sentence on one line of one column: every whitespace run (tab, no-break space, newline) one space."""
    return " ".join(line.split())


def read_pairs(data: Path, name: str, limit: int | None) -> list[tuple[str, str]] | None:
    """(English, German) of Multi30k's split `name`, the first `limit`; None where its files are not there."""
    paths = [data / f"{name}.{language}.gz" for language in LANGUAGES]
    if not all(path.is_file() for path in paths):
        return None
    with gzip.open(paths[0], "rt", encoding="utf-8") as en, gzip.open(paths[1], "rt", encoding="utf-8") as de:
        english, german = en.read().splitlines(), de.read().splitlines()
    if len(english) != len(german):
        sys.exit(f"{paths[0]} has {len(english)} lines and {paths[1]} {len(german)}: they must pair line by line")
    pairs = [(clean(e), clean(d)) for e, d in zip(english, german)][:limit]
    empty = next((i for i, pair in enumerate(pairs) if not all(pair)), None)
    if empty is not None:
        sys.exit(f"{name} line {empty + 1} is empty in one language: a pair needs both")
    return pairs


def write_tsvs(splits: dict[str, list[tuple[str, str]]], out: Path) -> list[Path]:
    """SPLIT_en-de.tsv and SPLIT_de-en.tsv of every split under `out` (a directory made by output_dir), each
    file written whole or not at all."""
    written = []
    for split, pairs in splits.items():
        for name, rows in (("en-de", pairs), ("de-en", [(d, e) for e, d in pairs])):
            path = out / f"{split}_{name}.tsv"
            written.append(write_atomic(path, "".join(f"{source}\t{target}\n" for source, target in rows)))
    return written


def train_bpe(texts: list[str], vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab, merges) of a BPE trained on `texts` as NLLB's tokenizer reads text (Metaspace, "▁" before each
    word), its ids 0-3 fairseq's specials, then the pieces, the language codes and <mask>, NLLB's order."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    pieces = vocab_size - len(CODES) - 1  # the language codes and <mask> come after the pieces
    trainer = trainers.BpeTrainer(vocab_size=pieces, special_tokens=SPECIALS, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]
    vocab, after = model["vocab"], len(model["vocab"])
    vocab.update({token: after + i for i, token in enumerate([*CODES, "<mask>"])})
    return vocab, merges


def build_model(out: Path, texts: list[str], vocab_size: int, seed: int):
    """The NLLB tokenizer and random-weight M2M100 saved in `out`; the tokenizer returned."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # saving one small file needs no bar
    vocab, merges = train_bpe(texts, vocab_size)
    tokenizer = transformers.NllbTokenizer(
        vocab=vocab, merges=merges, additional_special_tokens=CODES, model_max_length=MODEL["max_position_embeddings"]
    )
    tokenizer.save_pretrained(out)
    torch.manual_seed(seed)
    config = transformers.M2M100Config(vocab_size=len(tokenizer), **MODEL)
    model = transformers.M2M100ForConditionalGeneration(config)
    ids = ("bos_token_id", "pad_token_id", "eos_token_id", "decoder_start_token_id")
    model.generation_config = transformers.GenerationConfig(**{key: MODEL[key] for key in ids}, max_length=200)
    model.save_pretrained(out)
    return tokenizer


def check(out: Path) -> None:
    """The directory reloads as NLLB's does: the source's code first and </s> last."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(out, src_lang="deu_Latn")
    ids = tokenizer("Ein Hund")["input_ids"]
    if ids[0] != tokenizer.convert_tokens_to_ids("deu_Latn") or ids[-1] != tokenizer.eos_token_id:
        sys.exit(f"{out}'s tokenizer encodes 'Ein Hund' as {ids}, not [deu_Latn, ..., </s>]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where model/ and data/ are written")
    parser.add_argument("--data", type=Path, default=MULTI30K, help=f"Multi30k's .en.gz/.de.gz (default {MULTI30K})")
    vocab = whole_number(len(SPECIALS) + len(CODES) + 64, MAX_VOCAB, "--vocab-size")  # room for pieces
    parser.add_argument("--vocab-size", type=vocab, default=8000, help="the tokenizer's size, codes included")
    parser.add_argument("--seed", type=whole_number(0, 2**63 - 1, "--seed"), default=0, help="the weights' seed")
    parser.add_argument(
        "--limit", type=whole_number(1, MAX_PAIRS, "--limit"), help="the first N pairs of each split only"
    )
    try:
        return build(parser.parse_args(argv))
    except EncdecError as error:  # a number out of its range, an output path refused (a link on the way)
        sys.exit(f"multilingual_model.py: error: {error}")


def build(args: argparse.Namespace) -> int:
    splits = {split: read_pairs(args.data, name, args.limit) for split, name in SPLITS.items()}
    splits = {split: pairs for split, pairs in splits.items() if pairs is not None}
    if "train" not in splits:
        sys.exit(f"{args.data} holds no train.en.gz and train.de.gz (Multi30k, ../shared/data/README.md section 3)")
    texts = [text for pair in splits["train"] for text in pair]
    model_dir, data_dir = output_dir(args.out / "model", "--out"), output_dir(args.out / "data", "--out")
    tokenizer = build_model(model_dir, texts, args.vocab_size, args.seed)
    check(model_dir)
    written = write_tsvs(splits, data_dir)
    counts = ", ".join(f"{split} {len(pairs):,}" for split, pairs in splits.items())
    print(f"{args.out / 'model'}: M2M100 (NLLB's layout), a {len(tokenizer):,}-token NllbTokenizer, random weights")
    print(f"{args.out / 'data'}: {len(written)} TSV files, pairs per direction: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
