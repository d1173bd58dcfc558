"""`encdec evaluate MODEL [--data FILE [FILE2]]`: loss, perplexity and generated outputs scored.

MODEL is a run directory of `encdec train`, one of its checkpoint directories (copied anywhere), a
Hugging Face model directory (T5, BART, Marian, Pegasus; an `encdec export` directory among them) or a
Hub id org/name[@revision].

With --data, a test file in one of the corpus formats training reads (--format; a run's own
data.format by default, else told by the extension: .tsv tsv, .txt text, two files parallel):
- pairs (tsv, jsonl-pairs, parallel, instruct): the loss per reference token over every pair,
  teacher-forced, sources cut as generation cuts them; then an output generated for every
  input (or the first --samples) and scored: ROUGE-1/2/L/Lsum, BLEU, chrF, TER, exact match.
  Consecutive pairs with the same source (--target-list each) are one input with several
  references, which BLEU, chrF and TER take together (ROUGE the best, exact match any);
- text (text, jsonl, tinystories, instruct-text, instruct-records): the loss per token over every document, its
  perplexity, and the perplexity per whitespace-separated word, which compares tokenizers. A
  causal LM slides windows of its context over each document; an encoder-decoder predicts
  each half-length window given the previous one, as UL2's S-denoiser reads a chunk
  (encdec.evaluation.likelihood); --samples N continues N windows of the documents too (each
  document's first window, then their second ...: a file that is one running text gives N).
Results go to --out DIR (needed for a Hugging Face model or a checkpoint directory: nothing is written
inside a model directory or the Hugging Face cache), else RUN_DIR/eval/<file name>/ (and <checkpoint>/ under
it for a --checkpoint other than best): eval.json (with the checkpoint scored and why that one), eval.md and
predictions.jsonl (source, reference, prediction).

Without --data, a run is scored on its own validation split, as training scored it: the loss
is the mean cross-entropy over `--batches` batches of the run's own objective (the figure its
metrics.jsonl holds), then --samples validation examples are generated and scored (a language
model's windows of its documents, the same way, split as UL2's S-denoiser splits them); results go
to RUN_DIR/eval/.

Every score stands beside a trivial baseline's (a uniform guess over the vocabulary; each
input's first sentence copied). Both run on --device (default: a GPU when torch sees one, else
the CPU); --quantize int8 runs both through int8 linear layers there (encdec.quantize).
"""

import argparse
import os
import sys
from pathlib import Path

import torch

from encdec.cli.generate_text import add_text_generation_arguments
from encdec.cli.held import say_unless_refused
from encdec.cli.options import (
    MAX_ROWS,
    add_reader_options,
    given_generation_options,
    given_reader_options,
    resolve_device,
    whole_number,
)
from encdec.cli.output_paths import InputPath, OutputPath, add_model_argument
from encdec.data.formats import FILE_FORMATS, FORMATS, SPEECH_FORMATS
from encdec.errors import ConfigError
from encdec.evaluation.baselines import uniform_loss
from encdec.evaluation.encoding import TextEncoding, opened_encoding
from encdec.evaluation.files import TestFile, infer_format, read_test_file, reader_options
from encdec.evaluation.report import perplexity
from encdec.evaluation.scoring import (
    REPORT_FILES,
    Example,
    evaluate_documents,
    evaluate_pairs,
    evaluate_recordings,
    generated_scores,
    write_evaluation,
)
from encdec.generation.generate import resolve_config
from encdec.generation.interface import capabilities_of
from encdec.interop.hub_ids import resolve_model
from encdec.quantization import quantize
from encdec.runs.load import checkpoint_at
from encdec.runs.open import OpenedModel, load_tokenizer, model_kind, open_model
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import check_not_symlink, output_path, refuse_unsafe_output
from encdec.training.distributed import DistInfo
from encdec.training.run_config import saved_config
from encdec.training.run_data import build_run_data, generation_view
from encdec.training.samples import sample_pairs
from encdec.training.validation import evaluate

MAX_EVAL_BATCHES = 1_000_000  # batches for the loss, examples to generate: more is a typo, not an evaluation
OWN_SPLIT_SAMPLES = 8  # validation examples generated without --data
ONE_DOCUMENT_LINES = 100  # a file of documents read as one this long was read in a format other than its own
GENERATION_DEFAULTS = {"max_new_tokens": 64, "num_beams": 1}  # over a checkpoint's, so scores compare across models


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("evaluate", description=__doc__)
    add_model_argument(parser, "a run directory, a Hugging Face model directory, or a Hub id org/name[@rev]", "MODEL")
    parser.add_argument(
        "--data",
        nargs="+",
        type=InputPath("--data", Path),
        metavar="FILE",
        help="a test file (two for --format parallel)",
    )
    parser.add_argument(
        "--format", choices=FILE_FORMATS, help="the test file's format (default: the run's, or its extension's)"
    )
    add_reader_options(parser, default="the run's, or ")
    parser.add_argument(
        "--out",
        type=OutputPath("--out", "a directory for the report", Path, directory=True),
        help="the report's directory (default: RUN_DIR/eval[/<file name>])",
    )
    parser.add_argument(
        "--batches",
        type=whole_number(1, MAX_EVAL_BATCHES, "--batches"),
        default=None,
        help="without --data: batches of the run's objective for the loss (default: the run's evaluation.steps)",
    )
    parser.add_argument(
        "--samples",
        type=whole_number(1, MAX_EVAL_BATCHES, "--samples"),
        default=None,
        help=f"examples to generate and score (default: every pair of --data, no document of a text file, "
        f"{OWN_SPLIT_SAMPLES} of the validation split)",
    )
    parser.add_argument(
        "--batch-size", type=whole_number(1, MAX_ROWS, "--batch-size"), default=32, help="examples run at a time"
    )
    parser.add_argument("--rot5-preprocessing", action="store_true", help="ROT5's ROUGE preprocessing")
    add_text_generation_arguments(parser, GENERATION_DEFAULTS)
    parser.set_defaults(func=run)


@torch.no_grad()
def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    path = resolve_model(args.model)
    if args.data is None:
        out = args.out or per_checkpoint(RunDir(path).eval_dir, args.checkpoint)
        check_output(out, path if args.out is None else None)  # before anything is read
        kind = model_kind(path)
        if kind != "run":
            what = "a Hugging Face model" if kind == "hf" else "a checkpoint directory, not its run"
            raise ConfigError(f"{args.model} is {what}, which has no validation split: give --data FILE")
        return own_split(args, path, out, device)
    if args.batches:
        raise ConfigError("--batches counts batches of a run's own validation split; with --data every pair is scored")
    if len(args.data) > 2:
        raise ConfigError(f"--data takes one file, or two for --format parallel, got {len(args.data)}")
    kind = model_kind(path)
    out = report_dir(args, path, kind)
    test = read_data(args, path, kind)  # bad data: refused before the model loads
    opened = open_for_scoring(args, device)
    options = generation_options(args)
    check_reads(opened.model, test)  # recordings for a speech model, texts for a text model
    encoding = text_encoding(opened, options) if not FORMATS[test.format].audio else None  # refused here
    progress = sys.stderr.isatty()  # bars on a terminal only: never in a log
    common = dict(batch_size=args.batch_size, device=device, progress=progress, **options)
    if FORMATS[test.format].audio:
        language = options.get("language", opened.generation.get("language"))
        task = options.get("task", opened.generation.get("task")) or "transcribe"
        tokenizer = opened.run.tokenizer if opened.run is not None else load_tokenizer(path)
        result = evaluate_recordings(
            opened.model, opened.text, tokenizer, test.pairs, args.samples, language=language, task=task, **common
        )
    elif test.pairs is not None:
        result = evaluate_pairs(
            opened.model, encoding, test.pairs, args.samples, rot5_preprocessing=args.rot5_preprocessing, **common
        )
    else:
        result = evaluate_documents(
            opened.model, encoding, test.documents, args.samples, rot5_preprocessing=args.rot5_preprocessing, **common
        )
    result.notes.insert(0, f"test file {' and '.join(map(str, args.data))}, read as --format {test.format}")
    about = {"files": [os.path.abspath(p) for p in args.data], "format": test.format, **opened_model(args, opened)}
    report(write_evaluation(out, result, about))
    return 0


def own_split(args: argparse.Namespace, path: Path, out: Path, device: torch.device) -> int:
    """A run on its own validation split: the loss of its objective's batches, then samples generated into `out`."""
    opened = open_for_scoring(args, device)
    cfg = saved_config(opened.run.checkpoint)  # the run's training config: its data, objective and batches
    if args.batches:
        cfg.evaluation.steps = args.batches
    data = build_run_data(cfg, path, tokenizer_dir=opened.run.checkpoint.tokenizer)
    losses = evaluate(opened.model, data, cfg, DistInfo(device=device), splits=("val",))  # the train loss: not asked
    opened.model.eval()
    pairs = sample_pairs(cfg, opened.run.tokenizer, args.samples or OWN_SPLIT_SAMPLES)
    examples = [Example(source, [reference]) for source, reference in pairs]
    options = generation_options(args)
    progress = sys.stderr.isatty()
    seq2seq = cfg.objective.kind == "seq2seq"  # a language model's inputs are cut mid-sentence: no first sentence
    result = generated_scores(
        opened.model, opened.text, examples, args.batch_size, args.rot5_preprocessing, seq2seq, progress, **options
    )
    loss = {"val_loss": losses["val_loss"], "val_perplexity": perplexity(losses["val_loss"])}
    result.scores, result.baseline = (
        loss | result.scores,
        uniform_loss(opened.run.tokenizer.vocab_size) | result.baseline,
    )
    where = "--batches" if args.batches else "the run's evaluation.steps; --batches N for more"
    result.notes.insert(
        0, f"loss over {cfg.evaluation.steps} validation batches of {cfg.training.batch_size} ({where})"
    )
    report(write_evaluation(out, result, {"split": "validation", **opened_model(args, opened)}))
    return 0


def read_data(args: argparse.Namespace, path: Path, kind: str) -> TestFile:
    """The --data file, read in --format, else a run's data.format (a file format, not a `datasets` corpus; a
    mixture's first member's), else its extension's; jsonl options as given, else a run's own where it read the
    same format."""
    run_data = generation_view(saved_config(checkpoint_at(path, args.checkpoint))).data if kind != "hf" else None
    fmt = args.format or (run_data.format if run_data and run_data.format in FILE_FORMATS else infer_format(args.data))
    defaults = vars(run_data) if run_data and run_data.format == fmt else None
    test = read_test_file(args.data, fmt, reader_options(fmt, given_reader_options(args), defaults))
    if args.format is None and test.documents is not None and len(test.documents) == 1:
        lines = test.documents[0].count("\n") + 1
        if lines >= ONE_DOCUMENT_LINES:  # the run's format or the extension's is not the file's own
            raise ConfigError(
                f"{args.data[0]} read as --format {fmt} is one document of {lines:,} lines; give the format it is "
                "written in (--format text: paragraphs apart by blank lines; jsonl; tinystories: <|endoftext|> "
                "between documents)"
            )
    return test


def report_dir(args: argparse.Namespace, path: Path, kind: str) -> Path:
    """--out, or for a run RUN_DIR/eval/<test file name>/; checked before any work."""
    if args.out is None and kind != "run":
        where = "a Hugging Face model directory or the Hugging Face cache" if kind == "hf" else "a checkpoint directory"
        raise ConfigError(f"--out DIR is needed to evaluate {args.model}: encdec writes no report inside {where}")
    out = args.out or per_checkpoint(RunDir(path).eval_dir / args.data[0].name.split(".")[0], args.checkpoint)
    check_output(out, path if args.out is None else None, path if kind != "run" else None)
    return out


def per_checkpoint(directory: Path, checkpoint: str | None) -> Path:
    """A run's report directory for `checkpoint`: `directory` for its best (None's), `directory/<checkpoint>` for
    another, so that evaluating two checkpoints on one file keeps both reports."""
    return directory if checkpoint in (None, "best") else directory / checkpoint


def opened_model(args: argparse.Namespace, opened: OpenedModel) -> dict:
    """What eval.json records of the model scored: its path and, for a run, the checkpoint and why that one."""
    if opened.run is None:
        return {"model": str(args.model)}
    return {"model": str(args.model), "checkpoint": opened.run.checkpoint.name, "checkpoint_chosen": opened.run.chosen}


def check_output(out: Path, run: Path | None = None, model: Path | None = None) -> None:
    """Refuse a report directory that is a file, an unsafe place, inside the model directory `model` (a Hugging
    Face directory or a checkpoint directory) or the Hub cache, or that is (or holds report files that are) symlinks; `run`: a run's own eval directory."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; the report needs a directory")
    if run is None:
        refuse_unsafe_output(out)
    real = Path(os.path.realpath(out))
    for protected in filter(None, (model, hub_cache())):
        protected = Path(os.path.realpath(protected))
        if real == protected or protected in real.parents:
            raise ConfigError(f"--out {out} lies inside {protected}; write the report to a directory of its own")
    links = [out, *(out / name for name in REPORT_FILES)]
    if run is not None:
        links.insert(0, RunDir(run).eval_dir)
    check_not_symlink(*links)
    output_path(out, "--out" if run is None else "the report directory")


def hub_cache() -> Path | None:
    """huggingface_hub's model cache, where a Hub id's files lie (None where huggingface_hub is not installed)."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return None
    return Path(constants.HF_HUB_CACHE)


def open_for_scoring(args: argparse.Namespace, device: torch.device) -> OpenedModel:
    """The model on `device` (int8 with --quantize), its generation options checked before any work."""
    opened = open_model(args.model, args.checkpoint, args.max_source_len, dtype=args.dtype)
    say_unless_refused(opened.said)  # which checkpoint, and why
    resolve_config(opened.model, generation_options(args))
    opened.model.to(device)
    if args.quantize:  # the loss and the generations both run through the int8 layers
        quantize(opened.model, args.quantize)
    return opened


def text_encoding(opened: OpenedModel, options: dict) -> TextEncoding:
    """A run's text encoding (its templates, its UL2 [S] token) or a Hugging Face tokenizer's, in the languages
    of `options`' src_lang (inputs) and tgt_lang (references)."""
    return opened_encoding(opened, options.get("src_lang"), options.get("tgt_lang"))


def check_reads(model, test: TestFile) -> None:
    """One sentence where the test file's inputs are not what the model reads: recordings (--format speech-jsonl,
    speech-tsv) for a speech model, texts for the others."""
    hears, speech = capabilities_of(model).reads_features, FORMATS[test.format].audio
    if hears != speech:
        needs = "recordings: --format " + " or ".join(SPEECH_FORMATS) if hears else "text, not recordings"
        raise ConfigError(f"--format {test.format} does not fit this model, which reads {needs}")


def report(paths: list[Path]) -> None:
    print(paths[1].read_text(), end="")  # eval.md: the table, its notes and the first samples
    print(f"written: {', '.join(str(p) for p in paths)}")


def generation_options(args: argparse.Namespace) -> dict:
    """The generation options the command line set: GENERATION_DEFAULTS' lengths and beams, and any other given."""
    return given_generation_options(args)
