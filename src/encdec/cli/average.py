"""`encdec average RUN --last N`: the mean of a run's last N checkpoints' weights, as a checkpoint of its own.

    encdec average runs/wmt --last 5                 # -> runs/wmt/checkpoints/avg5_step_00010000
    encdec average runs/wmt --steps 8000,9000,10000  # those steps' checkpoints
    encdec average runs/wmt --last 5 --out runs/wmt-avg5   # a new run directory instead
    encdec average runs/wmt --ema                    # the EMA weights of latest (training.ema_decay)
    encdec evaluate runs/wmt --checkpoint avg5_step_00010000

Each weight is the element-wise mean over the checkpoints (fairseq's average_checkpoints.py). The
averaged checkpoint evaluates, generates and exports like any other (--checkpoint NAME); it holds no
optimizer state, and no keep_last rotation, resume, latest or best ever takes it. With --out it is the
one checkpoint of a new run directory. --ema writes instead the moving average of the weights
that a checkpoint of a run trained with training.ema_decay keeps (ema_step_XXXXXXXX). LoRA runs are refused.
"""

import argparse
from typing import Annotated

from encdec.cli.options import whole_number
from encdec.cli.output_paths import InputPath, OutputPath
from encdec.errors import ConfigError
from encdec.runs.state import MAX_STEPS
from encdec.runs.weight_average import average_checkpoints, export_ema
from encdec.schema import Range, argument_type


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("average", description=__doc__)
    parser.add_argument("run", type=InputPath("the run"), help="a run directory of encdec train")
    parser.add_argument("--last", type=whole_number(1, MAX_STEPS, "--last"), help="average the newest N checkpoints")
    parser.add_argument(
        "--steps",
        type=argument_type(list[Annotated[int, Range(0, MAX_STEPS)]], "--steps"),
        help="average the checkpoints of these steps, comma-separated",
    )
    parser.add_argument("--ema", action="store_true", help="write a checkpoint's EMA weights instead")
    parser.add_argument("--checkpoint", default=None, help="--ema: the checkpoint whose EMA (default latest)")
    parser.add_argument(
        "--out",
        "-o",
        type=OutputPath("--out", "a directory for the new run", directory=True),
        help="write a new run directory here instead of a checkpoint in RUN",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.out is not None and not args.out.strip():
        raise ConfigError("--out must name the directory to write, not an empty string")
    if args.ema:
        if args.last is not None or args.steps is not None:
            raise ConfigError("--ema writes one checkpoint's EMA weights; it takes no --last or --steps")
        made = export_ema(args.run, args.checkpoint or "latest", args.out)
    elif args.checkpoint is not None:
        raise ConfigError(
            "--checkpoint names the checkpoint whose EMA --ema writes; an average takes --last or --steps"
        )
    else:
        made = average_checkpoints(args.run, args.last, args.steps, args.out)
    where = f"--checkpoint {made.name}" if args.out is None else f"the run directory {args.out}"
    print(f"wrote {made.path}; evaluate, generate or export it with {where}")
    return 0
