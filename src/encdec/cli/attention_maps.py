"""`encdec attention MODEL --source TEXT -o maps.png`: what a model attends to, drawn as heat maps.

MODEL is a run directory of `encdec train`, a Hugging Face directory (T5, BART, Marian, Pegasus) or a Hub
id org/name[@revision], of a transformer encoder-decoder. The model reads --source (cut as `encdec
generate` cuts an input: --max-source-len, else the length it was trained with) and is teacher-forced
over --target, or over its own greedy output (at most --max-new-tokens tokens) when none is given. The
probabilities are those its forward pass computes (encdec.inspection), positions, masks and grouped
heads included.

  encdec attention runs/rot5 --source "A dog runs." -o maps.png                 every decoder layer, heads averaged
  encdec attention runs/rot5 --source "A dog runs." -o heads.png --heads grid --layer 0   each head of layer 0
  encdec attention runs/rot5 --source "A dog runs." -o enc.png --encoder        encoder self-attention
  encdec attention google/flan-t5-small --source "..." --target "..." -o m.png --npz m.npz   and the numbers

Source tokens run along x, the query's tokens along y (the target's; with --encoder the source's);
layers and heads are counted from 0. --npz also writes the probabilities (cross (L, H, T, S), encoder
(L, H, S, S)) and the tokens as a NumPy archive. Output files are written through a new file renamed
into place, never through a link, and never inside a run's checkpoints or a Hugging Face model directory.
"""

import argparse
import os
from pathlib import Path

from encdec.cli.held import say_unless_refused
from encdec.cli.options import (
    add_checkpoint_argument,
    add_device_argument,
    add_dtype_argument,
    add_generation_option,
    add_source_length_argument,
    resolve_device,
    whole_number,
)
from encdec.cli.output_paths import OutputPath, add_model_argument
from encdec.errors import ConfigError
from encdec.inspection import attention_maps, plot_attention, save_maps
from encdec.inspection.record import check_has_maps
from encdec.runs.open import open_model
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import output_path

MAX_LAYER = 1 << 16


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("attention", description=__doc__)
    add_model_argument(parser, "a run directory of encdec train, a Hugging Face directory or a Hub id")
    parser.add_argument("--source", required=True, help="the text the model reads")
    parser.add_argument("--target", default=None, help="the text it writes (default: its own greedy output)")
    parser.add_argument(
        "--output", "-o", type=OutputPath("-o", "the PNG file", Path), required=True, help="the PNG file to write"
    )
    parser.add_argument(
        "--layer", type=whole_number(0, MAX_LAYER, "--layer"), default=None, help="only this layer (0 = the first)"
    )
    parser.add_argument(
        "--heads",
        choices=("mean", "grid"),
        default="mean",
        help="mean: one panel per layer, heads averaged (default); grid: one panel per head of --layer "
        "(default: the last layer)",
    )
    parser.add_argument("--encoder", action="store_true", help="the encoder's self-attention instead")
    parser.add_argument(
        "--npz",
        type=OutputPath("--npz", "the .npz file", Path),
        default=None,
        help="also write the probabilities and tokens here (.npz)",
    )
    add_checkpoint_argument(parser)
    add_source_length_argument(parser)
    add_dtype_argument(parser)
    add_generation_option(parser, "max_new_tokens", 64, "the most target tokens drawn, generated or given")
    add_device_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output(args.output, "-o", ".png")
    if args.npz is not None:
        check_output(args.npz, "--npz", ".npz")
    if not args.source.strip():
        raise ConfigError("--source is empty; give the text the model should read")
    if args.target is not None and not args.target.strip():
        raise ConfigError("--target is empty; give the text the model should write, or leave it out")
    device = resolve_device(args.device)
    opened = open_model(args.model, args.checkpoint, max_source_len=args.max_source_len, dtype=args.dtype)
    say_unless_refused(opened.said)  # which checkpoint, and why
    check_has_maps(opened.model)
    for path, flag in ((args.output, "-o"), (args.npz, "--npz")):
        if path is not None:
            check_outside(path, flag, opened.path)
    side = "encoder" if args.encoder else "decoder"
    layers = len(opened.model.encoder.blocks if args.encoder else opened.model.decoder.blocks)
    if args.layer is not None and args.layer >= layers:
        raise ConfigError(f"--layer {args.layer} does not exist: the {side} has {layers} layers, 0 to {layers - 1}")
    maps = attention_maps(opened, args.source, args.target, max_new_tokens=args.max_new_tokens, device=device)
    plot_attention(maps, args.output, layer=args.layer, heads=args.heads, encoder=args.encoder)
    if args.npz is not None:
        save_maps(maps, args.npz)
    kind = "encoder self-attention" if args.encoder else "cross-attention"
    queries = "source" if args.encoder else ("generated target" if maps.generated else "target")
    rows = len(maps.source_tokens if args.encoder else maps.target_tokens)
    blocks = (maps.encoder.shape[-1] - len(maps.source_tokens)) if args.encoder else 0  # LongT5's global keys
    also = f" and {blocks} block keys" if blocks else ""
    print(f"wrote {args.output}: {kind}, {rows} {queries} x {len(maps.source_tokens)} source tokens{also}")
    if args.npz is not None:
        print(f"wrote {args.npz}: the probabilities and the tokens")
    return 0


def check_output(path: Path, flag: str, suffix: str) -> None:
    """Refuse before any work an output file with another suffix, that is or goes through a symlink, that is a
    directory or in one that does not exist, or that lies inside a run's checkpoints/ (which training alone
    writes)."""
    if path.suffix.lower() != suffix:
        raise ConfigError(f"{flag} {path} must name a {suffix} file")
    output_path(path, flag)  # no symlink at it or on the way
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; name the {suffix} file to write")
    if not path.parent.is_dir():
        raise ConfigError(f"{flag} {path}: the directory {path.parent} does not exist")
    real = Path(os.path.realpath(path.parent))
    for folder in (real, *real.parents):
        if folder.name == "checkpoints" and RunDir(folder.parent).is_run():
            raise ConfigError(
                f"{flag} {path} lies inside the checkpoints of the run {folder.parent}; write it elsewhere"
            )


def check_outside(path: Path, flag: str, model: Path) -> None:
    """Refuse an output file inside the Hugging Face model directory read (a Hub id's snapshot among them)."""
    if RunDir(model).is_run():
        return  # a run's own directory may hold its pictures; its checkpoints are refused by check_output
    real, protected = Path(os.path.realpath(path.parent)), Path(os.path.realpath(model))
    if real == protected or protected in real.parents:
        raise ConfigError(f"{flag} {path} lies inside the model directory {model}; write it elsewhere")
