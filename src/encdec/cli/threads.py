"""`--threads N` on every command that computes: torch's CPU threads, chosen from the free cores when not given.

A run (train, compare) takes it as training.threads, which its checkpoints keep; generate, transcribe, evaluate, score,
attention, serve and demo set it for their process. Not given, each takes the cores other processes leave free as
it starts (encdec.sizing.choose_threads; OMP_NUM_THREADS, where set, is taken as given): on a 2-core machine with
another job running, 2 threads made steps 3-10x slower than 1.
"""

import argparse
from typing import Annotated

from encdec.schema import Range, argument_type

MAX_THREADS = 4096  # runs.state.MAX_THREADS: above the cores a count is capped with a warning
RUNS = ("train", "compare")  # their runs choose, record and keep their threads (training.threads)
COMPUTING = ("demo", "generate", "transcribe", "evaluate", "score", "attention", "serve", *RUNS)


def add_threads_option(parser: argparse.ArgumentParser, command: str) -> None:
    """--threads on `command`'s parser where it computes."""
    if command not in COMPUTING:
        return
    says = "training.threads of every run" if command in RUNS else "torch's CPU threads for this command"
    parser.add_argument(
        "--threads",
        type=argument_type(Annotated[int, Range(1, MAX_THREADS)], "--threads"),  # cli.options' imports torch
        default=None,
        metavar="N",
        help=f"{says} (default: the cores other processes leave free as it starts)",
    )


def use_threads(args: argparse.Namespace) -> None:
    """Set the threads `args` asks for or the free cores give, for a command that computes in this process;
    a run's `--threads` becomes `--set training.threads=N` (its setup chooses, records and keeps them)."""
    if args.command not in COMPUTING:
        return
    if args.command in RUNS:
        if args.threads is not None:
            args.set = [*args.set, f"training.threads={args.threads}"]
        return
    import torch

    from encdec.sizing import choose_threads

    threads = choose_threads(args.threads, "--threads")
    if threads is not None:
        torch.set_num_threads(threads)
