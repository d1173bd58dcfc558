"""`encdec train CONFIG.yaml --out RUN_DIR [--resume [--accept-changes]] [--set key.sub=value ...]`.

Stopped by SIGINT or SIGTERM, it saves, prints the exact command that resumes the
run, and exits 128 + the signal number (130 for Ctrl-C), so scripts can tell a stop
from success. `--nproc-per-node N` trains in N processes it starts itself (as torchrun
would), and a failure is one sentence, where torchrun adds its own traceback.
"""

import json
import os
import shlex
import signal
from pathlib import Path

import torch

from encdec.cli.options import whole_number
from encdec.cli.output_paths import InputPath, add_out_directory
from encdec.errors import ConfigError
from encdec.schema import field_type
from encdec.training import load_config, train
from encdec.training.adaptation import ADAPTATION_FILE, summary
from encdec.training.distributed import read_layout
from encdec.training.launch import LAUNCHED_BY, check_before_launch, check_before_start, launch_workers, local_layout
from encdec.training.run_config import TrainingSection

MAX_NPROC = 1024  # processes one machine starts


def add_parser(subparsers):
    parser = subparsers.add_parser("train")
    parser.add_argument("config", type=InputPath("the run config"), help="the run config (YAML)")
    add_out_directory(parser, "a run directory", "the run directory: checkpoints, metrics, plots")
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    parser.add_argument(
        "--accept-changes",
        action="store_true",
        help="with --resume: continue although the config differs from the run's (recorded in the run)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    parser.add_argument(
        "--max-time",
        type=field_type(TrainingSection, "max_time", "--max-time"),
        metavar="TIME",
        help="training.max_time: stop after this much training (90s, 15m, 1h30m, 1:30:00 or seconds), "
        "evaluated and saved",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=whole_number(1, MAX_NPROC, "--nproc-per-node"),
        default=1,
        metavar="N",
        help="train in N processes on this machine (DDP or FSDP, as training.distributed says), started as torchrun would",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.max_time is not None:
        args.set = [*args.set, f"training.max_time={args.max_time!r}"]  # seconds, as the option read them
    cfg = load_config(args.config, args.set)
    if args.accept_changes and not args.resume:
        raise ConfigError("--accept-changes goes with --resume")
    if not args.out.strip():
        raise ConfigError("--out must name the run directory, not an empty string")
    several = args.nproc_per_node > 1
    layout = local_layout(args.nproc_per_node, cfg.training.device) if several else read_layout()
    check_before_start(cfg, layout)  # what every process would refuse alike, before any starts
    if several:
        check_before_launch(cfg, args.out, args.resume)  # what the processes would refuse once they met
        return launch_workers(train_words(args), args.nproc_per_node, args.verbose)
    result = train(cfg, Path(args.out), resume=args.resume, accept_changes=args.accept_changes)
    if not result.is_main:  # another process under torchrun: rank 0 reports
        return 0
    threads = torch.get_num_threads()  # as chosen (--threads, training.threads or the free cores) and kept
    print(
        f"{result.steps} steps in {result.wall_time:.1f}s ({result.tokens_per_s:,.0f} target tokens/s, "
        f"{threads} CPU thread{'' if threads == 1 else 's'}); {result.parameters:,} parameters"
    )
    adaptation = Path(args.out) / ADAPTATION_FILE
    if not args.resume and adaptation.is_file():  # a decoder-only model adapted: what came from where
        print(summary(json.loads(adaptation.read_text())))
    if result.val_loss is not None:
        print(
            f"at step {result.eval_step} (its last evaluation): train loss {result.train_loss:.4f}, "
            f"validation loss {result.val_loss:.4f}"
        )
    if result.out_of_time:
        print(f"stopped at step {result.steps}: training.max_time reached; evaluated and saved")
    if result.early_stopped:
        print(
            f"stopped early at step {result.steps}: training.early_stopping_patience evaluations without a "
            f"better {cfg.output.best_by}"
        )
    if result.interrupted:
        print(f"stopped by signal; resume with: {resume_command(args)}")
        return 128 + (result.signal or signal.SIGINT)
    return 0


def resume_command(args) -> str:
    """The command that continues this run exactly: same config, same overrides, --resume (and the same
    processes, where encdec's launcher started this one)."""
    processes = os.environ.get(LAUNCHED_BY)
    words = ["encdec", *train_words(args, resume=True), *(["--nproc-per-node", processes] if processes else [])]
    return shlex.join(str(word) for word in words)


def train_words(args, resume: bool = False) -> list[str]:
    """This command's words after `encdec`, without --nproc-per-node: what each launched process runs."""
    words = [*(["-v"] if args.verbose else []), "train", args.config, "--out", args.out]
    words += ["--resume"] if args.resume or resume else []
    words += ["--accept-changes"] if args.accept_changes and not resume else []
    for assignment in args.set:
        words += ["--set", assignment]
    return words
