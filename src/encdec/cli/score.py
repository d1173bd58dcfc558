"""`encdec score MODEL --data PAIRS`: the log-probability of each given target under the model, token by token.

    encdec score runs/multi30k --data test.tsv --out scores.jsonl --normalise gnmt
    encdec score google/flan-t5-small --data pairs.jsonl           # {"source": ..., "target": ...} a line

MODEL is what `encdec evaluate` takes: a run directory, one of its checkpoint directories, a Hugging Face model
directory or a Hub id. PAIRS is a test file of pairs in a format training reads: a .jsonl file of
{"source", "target"} objects (jsonl-pairs, with --source-field and --target-field for other names), a .tsv
file, two files of parallel lines, or any pair format named by --format. Each pair is scored teacher-forced,
its target tokenised as training tokenises it, EOS last (encdec.evaluation.pair_scores): the output is one
JSON line a pair, in the file's order, to --out (default: stdout):

    {"source": ..., "target": ..., "tokens": ["▁A", "▁dog", "</s>"], "token_ids": [...],
     "token_logprobs": [...], "total": -7.31, "score": -2.44, "normalise": "mean", "cut": false}

total is the sum of the tokens' log-probabilities (nats); score is it normalised by --normalise: sum, mean
(per token) or gnmt (GNMT's length penalty ((5 + L) / 6) ** --alpha); cut says the target was cut to the
model's position table (its scores are the prefix's). The mean of -token_logprobs over every token of the file
is the model's loss on it, as `encdec evaluate` reports it.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from encdec.cli.generate_text import open_output
from encdec.cli.held import say_unless_refused
from encdec.cli.options import (
    MAX_ROWS,
    add_checkpoint_argument,
    add_device_argument,
    add_dtype_argument,
    add_generation_option,
    add_reader_options,
    add_source_length_argument,
    given_reader_options,
    resolve_device,
    whole_number,
)
from encdec.cli.output_paths import InputPath, OutputPath, add_model_argument
from encdec.data.formats import FILE_FORMATS, FORMATS, PAIR_FORMATS
from encdec.errors import ConfigError
from encdec.evaluation.files import TestFile, infer_format, read_test_file, reader_options
from encdec.evaluation.pair_scores import NORMALISATIONS, PairScore, ScoreOptions, score_pairs
from encdec.inspection.maps import token_strings
from encdec.runs.open import OpenedModel, open_model
from encdec.schema import field_type

SCORED_FORMATS = tuple(name for name in PAIR_FORMATS if name in FILE_FORMATS)  # text pairs in files
JSONL_FIELDS = {"source_field": "source", "target_field": "target"}  # a .jsonl file's names unless given


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("score", description=__doc__)
    add_model_argument(parser, "a run directory, a Hugging Face model directory, or a Hub id org/name[@rev]", "MODEL")
    parser.add_argument(
        "--data",
        nargs="+",
        required=True,
        type=InputPath("--data", Path),
        metavar="FILE",
        help="the pairs: a .jsonl or .tsv file, or two files for --format parallel",
    )
    parser.add_argument(
        "--format",
        choices=SCORED_FORMATS,
        help="the pairs' format (default: .jsonl jsonl-pairs, .tsv tsv, two files parallel)",
    )
    add_reader_options(parser, "source and target for a .jsonl file; else ", SCORED_FORMATS)
    parser.add_argument(
        "--out",
        type=OutputPath("--out", "the scores' jsonl file", Path, stdout="-"),
        default="-",
        help="the jsonl file of scores (default: stdout)",
    )
    parser.add_argument(
        "--normalise", choices=NORMALISATIONS, default="mean", help="the score: sum, mean per token, or gnmt"
    )
    parser.add_argument(
        "--alpha", type=field_type(ScoreOptions, "alpha", "--alpha"), help="gnmt's exponent (default 0.6)"
    )
    parser.add_argument(
        "--batch-size", type=whole_number(1, MAX_ROWS, "--batch-size"), default=32, help="pairs run at a time"
    )
    add_checkpoint_argument(parser)
    add_source_length_argument(parser)
    add_dtype_argument(parser)
    add_device_argument(parser)
    for name in ("src_lang", "tgt_lang"):
        add_generation_option(parser, name, None, help=f"the language code the {name[:3]}s are in (NLLB: eng_Latn)")
    parser.set_defaults(func=run)


@torch.no_grad()
def run(args: argparse.Namespace) -> int:
    options = ScoreOptions(args.normalise, args.alpha)  # a bad combination refused before any work
    device = resolve_device(args.device)
    test = read_pairs(args)
    opened = open_model(args.model, args.checkpoint, args.max_source_len, dtype=args.dtype)
    say_unless_refused(opened.said)  # which checkpoint, and why
    opened.model.to(device)
    scores = score_pairs(opened, test.pairs, options, args.batch_size, args.src_lang, args.tgt_lang)
    out = sys.stdout if str(args.out) == "-" else open_output(Path(args.out), "--out")
    try:
        for (source, target), score in zip(test.pairs, scores):
            out.write(json_line(record(opened, source, target, score, options)))
    finally:
        if out is not sys.stdout:
            out.close()
    cut = sum(score.cut for score in scores)
    if cut:
        say_unless_refused(f"{cut} of {len(scores)} targets were cut to the model's positions (their cut is true)")
    return 0


def read_pairs(args: argparse.Namespace) -> TestFile:
    """The --data pairs in --format, else the one the files say (.jsonl: jsonl-pairs of source and target)."""
    if len(args.data) > 2:
        raise ConfigError(f"--data takes one file, or two for --format parallel, got {len(args.data)}")
    jsonl = len(args.data) == 1 and ".jsonl" in [s.lower() for s in args.data[0].suffixes]
    fmt = args.format or ("jsonl-pairs" if jsonl else infer_format(args.data))
    if not FORMATS[fmt].pairs:
        raise ConfigError(f"--format {fmt} holds texts, not pairs; encdec score reads a pair format")
    defaults = JSONL_FIELDS if fmt == "jsonl-pairs" else None
    test = read_test_file(args.data, fmt, reader_options(fmt, given_reader_options(args), defaults))
    if not test.pairs:
        raise ConfigError(f"{args.data[0]} holds no pairs to score")
    return test


def record(opened: OpenedModel, source: str, target: str, score: PairScore, options: ScoreOptions) -> dict:
    """One pair's line: its texts, its target's tokens (as strings and ids), their log-probabilities and scores."""
    tokens = token_strings(opened, score.token_ids)
    return {"source": source, "target": target, **score.record(tokens), "normalise": options.normalise}


def json_line(value: dict) -> str:
    """`value` as one line of JSON (U+2028 and U+2029 escaped: JSON allows them raw, line readers do not)."""
    return json.dumps(value, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") + "\n"
