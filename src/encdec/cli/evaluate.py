"""`encdec evaluate RUN_DIR`: loss and perplexity on a split, then generated samples scored.

Loss is the mean cross-entropy over `--batches` batches of the run's own objective
on the split. Samples: for a seq2seq run, validation sources are generated from and
scored against their targets; for a language-model run (UL2, causal LM), each
validation document is split as UL2's S-denoiser splits it, the first half is the
input and the rest the reference. Scores are ROUGE-1/2/L/Lsum, BLEU, chrF, TER and
exact match, each beside a trivial baseline's (the output tokens generated per second
are printed too); results go to RUN_DIR/eval/eval.json and eval.md, with samples
beside their references. Both run on --device (default: a
GPU when torch sees one, else the CPU); --quantize int8 runs both through int8 linear
layers there (encdec.quantize: fbgemm's kernels on the CPU, torch._int_mm on a GPU).
"""

import argparse
import sys
from pathlib import Path

import torch

from encdec.cli.generate import (
    MAX_ROWS,
    add_device_argument,
    add_generation_option,
    add_quantize_argument,
    add_source_length_argument,
    resolve_device,
    whole_number,
)
from encdec.evaluation.baselines import lead_scores, uniform_loss
from encdec.evaluation.generated import generate_texts
from encdec.evaluation.metrics import score_texts
from encdec.evaluation.report import perplexity, write_report
from encdec.generation.generate import resolve_config
from encdec.quantization import quantize
from encdec.runs.load import load_run
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import check_not_symlink
from encdec.training.data import build_run_data
from encdec.training.distributed import DistInfo
from encdec.training.samples import sample_pairs
from encdec.training.trainer import evaluate

MAX_EVAL_BATCHES = 1_000_000  # batches for the loss, examples to generate: more is a typo, not an evaluation


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="loss, perplexity and scored generations of a run", description=__doc__
    )
    parser.add_argument("run_dir", type=Path, help="a run directory of encdec train")
    parser.add_argument("--checkpoint", default="best", help="best, latest, or a step directory name")
    parser.add_argument(
        "--batches",
        type=whole_number(1, MAX_EVAL_BATCHES, "--batches"),
        default=None,
        help="batches for the loss (default: the run's)",
    )
    parser.add_argument(
        "--samples",
        type=whole_number(1, MAX_EVAL_BATCHES, "--samples"),
        default=8,
        help="validation examples to generate and score",
    )
    add_generation_option(parser, "max_new_tokens", 64)
    add_generation_option(parser, "num_beams", 1)
    parser.add_argument(
        "--batch-size", type=whole_number(1, MAX_ROWS, "--batch-size"), default=32, help="examples generated at a time"
    )
    parser.add_argument("--rot5-preprocessing", action="store_true", help="ROT5's ROUGE preprocessing")
    add_source_length_argument(parser)
    add_device_argument(parser)
    add_quantize_argument(parser)
    parser.set_defaults(func=run)


@torch.no_grad()
def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    report_dir = RunDir(args.run_dir).eval_dir
    check_not_symlink(report_dir, report_dir / "eval.json", report_dir / "eval.md")  # written at the end
    loaded = load_run(args.run_dir, args.checkpoint, args.max_source_len)
    options = dict(max_new_tokens=args.max_new_tokens, num_beams=args.num_beams)
    resolve_config(loaded.model, options)  # refused here, before the loss is computed or a progress bar drawn
    loaded.model.to(device)
    if args.quantize:  # the loss and the generations both run through the int8 layers
        quantize(loaded.model, args.quantize)
    cfg = loaded.config
    if args.batches:
        cfg.evaluation.steps = args.batches
    data = build_run_data(cfg, args.run_dir, tokenizer_dir=loaded.checkpoint.tokenizer)
    losses = evaluate(loaded.model, data, cfg, DistInfo(device=device), splits=("val",))  # the train loss: not asked
    loaded.model.eval()
    scores = {"val_loss": losses["val_loss"], "val_perplexity": perplexity(losses["val_loss"])}
    pairs = sample_pairs(cfg, loaded.tokenizer, args.samples)
    inputs, references = [p[0] for p in pairs], [p[1] for p in pairs]
    bar = sys.stderr.isatty()  # a progress bar on a terminal only: never in a log or before a refusal there
    generated = generate_texts(loaded.model, loaded.text, inputs, args.batch_size, progress=bar, **options)
    scores.update(score_texts(generated.predictions, references, args.rot5_preprocessing))
    baseline = uniform_loss(loaded.tokenizer.vocab_size)
    if cfg.objective.kind == "seq2seq":  # a language model's inputs are cut mid-sentence: no first sentence to copy
        baseline |= lead_scores(inputs, references, args.rot5_preprocessing)
    json_path, md_path = write_report(report_dir, scores, inputs, generated.predictions, references, baseline)
    print(md_path.read_text(), end="")
    where = "--batches" if args.batches else "the run's evaluation.steps; --batches N for more"
    print(f"loss over {cfg.evaluation.steps} validation batches of {cfg.training.batch_size} ({where})")
    rate = generated.new_tokens / generated.seconds
    print(f"generated {generated.new_tokens} tokens in {generated.seconds:.1f} s: {rate:.1f} tokens/s")
    print(f"written: {json_path}, {md_path}")
    return 0
