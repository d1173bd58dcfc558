"""`encdec data prepare` (tokenize a corpus into shards) and `encdec data inspect` (see what the model sees)."""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import textwrap
from pathlib import Path
from typing import Annotated

from encdec.cli.options import add_reader_options, flag_of, given_reader_options, whole_number
from encdec.cli.output_paths import InputPath, OutputPath
from encdec.data.batch import IGNORE_INDEX, Batch
from encdec.data.formats import TEXT_FILE_FORMATS, TEXT_FORMATS, read_corpus, reader_options
from encdec.data.objectives import OBJECTIVES, PairTemplate, build_objective
from encdec.data.passkey import passkey_examples, word_keys
from encdec.data.shards import prepare_shards, read_shards
from encdec.errors import ConfigError
from encdec.runs.text import MAX_LENGTH
from encdec.safe_paths import output_dir, output_path, write_atomic
from encdec.schema import Range, argument_type, field_type
from encdec.sizing import capped_to_cores
from encdec.tokenizers import KINDS, MANIFEST_NAME, UL2_MODE_TOKENS, Tokenizer, build_tokenizer, load_tokenizer
from encdec.training.data_sections import TokenizerSection
from encdec.training.run_config import MAX_PROCESSES, TrainingSection

# the short names `--objective` took before it took the run config's; still accepted
OBJECTIVE_ALIASES = {"causal": "causal_lm", "span": "span_corruption", "prefix": "prefix_lm"}
MAX_SHOWN = 1000  # examples `inspect` shows: a batch of them is built at --max-length
MAX_WIDTH = 1 << 16  # characters of an output line
MIN_PASSKEY = 64  # tokens of the shortest passkey example: the needle and the question take about 40
MAX_PASSKEY_EXAMPLES = 100_000  # passkey examples of each length (and depth)
MAX_PASSKEY_TOKENS = 1 << 28  # tokens of all the passkey examples one command writes (about 1 GB of text)


def objective_name(name: str) -> str:
    """The run config's name of an objective, the older short names accepted."""
    return OBJECTIVE_ALIASES.get(name, name)


def add_tokenizer_arguments(parser: argparse.ArgumentParser, counts: str) -> None:
    """--tokenizer (a kind or a tokenizer directory, `counts` saying what it is for) and --tokenizer-path."""
    parser.add_argument(
        "--tokenizer",
        required=True,
        type=InputPath("--tokenizer"),
        help=f"{counts}a kind ({', '.join(KINDS)}) or a tokenizer directory",
    )
    parser.add_argument(
        "--tokenizer-path", type=InputPath("--tokenizer-path", Path), help="model file for sentencepiece / hf"
    )


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("data")
    commands = parser.add_subparsers(dest="data_command", required=True)

    prepare = commands.add_parser("prepare", help="tokenize a corpus once into shards on disk")
    prepare.add_argument(
        "inputs",
        nargs="+",
        type=InputPath("the corpus file", Path),
        help="corpus files (plain or .gz); 'parallel' takes SOURCE TARGET",
    )
    prepare.add_argument("--format", required=True, choices=TEXT_FILE_FORMATS)
    prepare.add_argument(
        "--out",
        required=True,
        type=OutputPath("--out", "a directory for the shards", Path, directory=True),
        help="shard directory to write",
    )
    add_tokenizer_arguments(prepare, "")
    prepare.add_argument(
        "--vocab-size", type=field_type(TokenizerSection, "vocab_size"), default=8000, help="for trained bpe / unigram"
    )
    prepare.add_argument(
        "--num-sentinels",
        type=field_type(TokenizerSection, "num_sentinels"),
        help="sentinel tokens to add (default 500 sentencepiece, 100 others)",
    )
    prepare.add_argument("--mode-tokens", action="store_true", help="also add UL2 mode tokens [R] [X] [S]")
    prepare.add_argument(
        "--val-fraction",
        type=argument_type(Annotated[float, Range(0, 1, below=True)], "--val-fraction"),
        default=0.0,
        help="hash split for corpora without one",
    )
    prepare.add_argument("--seed", type=field_type(TrainingSection, "seed"), default=0)
    prepare.add_argument("--bos", action="store_true", help="prepend BOS to each document")
    prepare.add_argument("--no-eos", action="store_true", help="no EOS after each document (yif-AI)")
    prepare.add_argument("--source-template", default="{source}", help='e.g. "{source}\\nSummary:" (ROT5)')
    prepare.add_argument("--target-template", default="{target}")
    add_reader_options(prepare)
    prepare.add_argument("--dtype", default="auto", choices=["auto", "uint16", "uint32"])
    prepare.add_argument(
        "--workers",
        type=whole_number(0, MAX_PROCESSES, "--workers"),
        default=2,
        help="encoding processes (0 or 1: this one; at most the cores)",
    )
    prepare.set_defaults(func=run_prepare)

    inspect = commands.add_parser("inspect", help="show decoded examples of an objective, input beside target")
    inspect.add_argument(
        "shards", type=InputPath("the shard directory", Path), help="a directory written by `encdec data prepare`"
    )
    inspect.add_argument(
        "--objective",
        default="ul2",
        type=objective_name,
        choices=[kind for kind in OBJECTIVES if kind != "transcribe"],  # shards hold tokens, not recordings
        help="as objective.kind in a run config (causal, span and prefix also accepted)",
    )
    inspect.add_argument("--split", default="train")
    inspect.add_argument("-n", "--num-examples", type=whole_number(1, MAX_SHOWN, "--num-examples"), default=3)
    inspect.add_argument(
        "--max-length",
        type=whole_number(2, MAX_LENGTH, "--max-length"),
        default=512,
        help="chunk length (ul2, span_corruption, prefix_lm), source length (seq2seq)",
    )
    inspect.add_argument(
        "--block-size", type=whole_number(2, MAX_LENGTH, "--block-size"), default=128, help="window length (causal_lm)"
    )
    inspect.add_argument("--mode-tokens", action="store_true", help="prepend [R]/[X]/[S] (ul2)")
    inspect.add_argument("--seed", type=field_type(TrainingSection, "seed"), default=0)
    inspect.add_argument(
        "--width", type=whole_number(0, MAX_WIDTH, "--width"), default=0, help="output width (default: the terminal's)"
    )
    inspect.set_defaults(func=run_inspect)

    passkey = commands.add_parser(
        "passkey", help="write passkey-retrieval examples: a fact planted at a depth of a long text (jsonl)"
    )
    passkey.add_argument(
        "inputs", nargs="+", type=InputPath("the corpus file", Path), help="the haystack's corpus files (plain or .gz)"
    )
    passkey.add_argument("--format", default="tinystories", choices=TEXT_FORMATS)
    passkey.add_argument(
        "--out", required=True, type=OutputPath("--out", "the jsonl file", Path), help="the jsonl file to write"
    )
    add_tokenizer_arguments(passkey, "what lengths count: ")
    passkey.add_argument(
        "--lengths",
        type=argument_type(list[Annotated[int, Range(MIN_PASSKEY, MAX_LENGTH)]], "--lengths"),
        required=True,
        help="source lengths in tokens, comma-separated",
    )
    passkey.add_argument(
        "--depths",
        type=argument_type(list[Annotated[float, Range(0, 1)]], "--depths"),
        help="depths of the needle (0 first, 1 last), comma-separated; none: drawn uniformly for each example",
    )
    passkey.add_argument(
        "--per-cell",
        type=whole_number(1, MAX_PASSKEY_EXAMPLES, "--per-cell"),
        default=1,
        help="examples of each length (and depth)",
    )
    passkey.add_argument(
        "--keys",
        choices=("digits", "words"),
        default="digits",
        help="five different digits, or a word of one token (one of 1,000 the tokenizer has)",
    )
    passkey.add_argument(
        "--digits", type=whole_number(1, 10, "--digits"), default=5, help="a digit key's length (different digits)"
    )
    passkey.add_argument("--seed", type=field_type(TrainingSection, "seed"), default=0)
    add_reader_options(passkey, formats=TEXT_FORMATS)
    passkey.set_defaults(func=run_passkey, mode_tokens=False, num_sentinels=0, vocab_size=8000)


def _make_tokenizer(args: argparse.Namespace, reading: dict) -> Tokenizer:
    if (Path(args.tokenizer) / MANIFEST_NAME).is_file():
        return load_tokenizer(args.tokenizer)
    if args.tokenizer not in KINDS:
        raise ConfigError(
            f"--tokenizer {args.tokenizer!r} is neither a kind ({', '.join(KINDS)}) nor a saved tokenizer directory"
        )
    options: dict = {"extra_specials": UL2_MODE_TOKENS if args.mode_tokens else ()}
    if args.num_sentinels is not None:
        options["num_sentinels"] = args.num_sentinels
    texts = None
    if args.tokenizer in ("bpe", "unigram"):
        options["vocab_size"] = args.vocab_size
        items = read_corpus(args.format, args.inputs, **reading)
        texts = (text for item in items for text in ((item,) if isinstance(item, str) else item))
    return build_tokenizer(args.tokenizer, args.tokenizer_path, texts=texts, **options)


def run_prepare(args: argparse.Namespace) -> int:
    options = reader_options(args.format, given_reader_options(args), flag_of)  # refused before any work
    tokenizer = _make_tokenizer(args, options)
    out = prepare_shards(
        args.out,
        tokenizer,
        args.format,
        args.inputs,
        val_fraction=args.val_fraction,
        seed=args.seed,
        add_bos=args.bos,
        add_eos=not args.no_eos,
        template=PairTemplate(args.source_template.replace("\\n", "\n"), args.target_template.replace("\\n", "\n")),
        dtype=args.dtype,
        workers=capped_to_cores(args.workers, "--workers"),
        reader_options=options,
    )
    splits = read_shards(out).manifest["splits"]
    for split, fields in splits.items():
        counts = ", ".join(
            f"{field}: {c['documents']:,} documents, {c['tokens']:,} tokens" for field, c in fields.items()
        )
        print(f"{out} [{split}] {counts}")
    print(f"tokenizer: {tokenizer.kind}, {tokenizer.vocab_size:,} ids")
    return 0


def run_passkey(args: argparse.Namespace) -> int:
    """Write passkey examples, each length (and depth) `--per-cell` times, to a jsonl file."""
    depths = args.depths or [None]
    total = sum(args.lengths) * len(depths) * args.per_cell
    if total > MAX_PASSKEY_TOKENS:
        raise ConfigError(f"these passkey examples would hold {total:,} tokens; at most {MAX_PASSKEY_TOKENS:,}")
    options = reader_options(args.format, given_reader_options(args), flag_of)
    tokenizer = _make_tokenizer(args, options)
    documents = read_corpus(args.format, args.inputs, **options)

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_eos=False))

    keys = None
    if args.keys == "words":  # the same keys whatever --seed and corpus: train, validation and test share them
        pieces = (tokenizer.decode([i]) for i in range(tokenizer.vocab_size))
        keys = [word for word in word_keys(pieces) if count_tokens(word) == 1]
    examples = passkey_examples(
        documents, count_tokens, args.lengths, args.depths, args.per_cell, args.seed, keys, args.digits
    )
    lines = [json.dumps(example) for example in examples]
    output_path(args.out, "--out")  # the writer's own check: no symlink on the way, the file itself none
    output_dir(args.out.parent, "--out's directory")  # made where missing
    write_atomic(args.out, "\n".join(lines) + "\n")
    print(f"{args.out}: {len(lines):,} passkey examples of {', '.join(map(str, args.lengths))} tokens")
    return 0


def inspect_objective(kind: str, shards, tokenizer: Tokenizer, batch_size: int, args: argparse.Namespace):
    """The objective `kind` over a ShardSet, with the inspect command's options."""
    if kind == "seq2seq":
        if "source" not in shards.fields:
            raise ConfigError(f"objective seq2seq needs pair shards; {shards.directory} holds plain text")
        data = (shards.fields["source"], shards.fields["target"])
    elif "text" not in shards.fields:
        raise ConfigError(f"objective {kind} needs text shards; {shards.directory} holds pairs (use seq2seq)")
    else:
        data = shards.fields["text"]
    seq_len = args.block_size if kind == "causal_lm" else args.max_length
    return build_objective(
        kind,
        data,
        tokenizer,
        batch_size,
        args.seed,
        seq_len=seq_len,
        max_source_len=args.max_length,
        mode_tokens=args.mode_tokens,
    )


def describe_batch(batch: Batch, tokenizer: Tokenizer) -> list[tuple[str, str, str]]:
    """(label, model input, loss target) texts of each example, specials written by name."""
    rows = []
    for i in range(batch.batch_size):
        real = batch.labels[i] != IGNORE_INDEX
        if batch.src_ids is not None:
            source = batch.src_ids[i][batch.src_mask[i]].tolist()
        elif batch.prefix_lengths is not None:  # prefix LM: the prefix is the input
            source = batch.tgt_ids[i][: int(batch.prefix_lengths[i])].tolist()
        else:  # causal LM: the window is the input
            source = batch.tgt_ids[i].tolist()
        target = batch.labels[i][real].tolist()
        input_text, target_text = tokenizer.decode([source, target], skip_special=False)
        mode = f" ({batch.modes[i]})" if batch.modes else ""
        rows.append((f"example {i}{mode}: {len(source)} input / {len(target)} target tokens", input_text, target_text))
    return rows


def side_by_side(left: str, right: str, width: int) -> str:
    column = max(20, (width - 3) // 2)

    def wrap(text: str) -> list[str]:
        return [piece for line in text.split("\n") for piece in (textwrap.wrap(line, column) or [""])]

    lefts, rights = wrap(left), wrap(right)
    return "\n".join(f"{a:<{column}} | {b}" for a, b in itertools.zip_longest(lefts, rights, fillvalue=""))


def run_inspect(args: argparse.Namespace) -> int:
    shards = read_shards(args.shards, args.split)
    tokenizer = shards.tokenizer()
    objective = inspect_objective(args.objective, shards, tokenizer, args.num_examples, args)
    batch = objective.next_batch()
    width = args.width or shutil.get_terminal_size((120, 24)).columns
    print(
        f"{args.objective} on {args.shards} [{args.split}]: "
        f"src {None if batch.src_ids is None else tuple(batch.src_ids.shape)}, "
        f"tgt {tuple(batch.tgt_ids.shape)}, {batch.num_tokens} loss tokens"
    )
    for label, source, target in describe_batch(batch, tokenizer):
        print(f"\n--- {label}")
        print(side_by_side("INPUT", "TARGET", width))
        print(side_by_side(source, target, width))
    return 0
