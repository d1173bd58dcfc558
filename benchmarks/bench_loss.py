"""The training loss over a wide vocabulary: the whole logits (compute_loss) against blocks of rows
(chunked_loss): each block's logits made again in the backward pass ("recomputed", any head), or a head of one
product's gradients formed block by block in the forward pass ("formed", LinearCrossEntropy). Forward and
backward of the head and the cross-entropy alone, each in a process of its own so that its peak memory is its
own.

    python benchmarks/bench_loss.py                          # vocab 32k and 256k, 2,048 rows of width 512
    python benchmarks/bench_loss.py --vocab 32000 --rows 8192 --width 768

Per vocabulary and way: ms for forward and backward (median of --steps) and the peak resident memory above
what the weights and hidden states hold (ru_maxrss on the CPU, max_memory_allocated on CUDA).

Shapes: N rows (batch x target length), C width, V vocabulary.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import encdec
from encdec.cli.options import whole_number
from encdec.errors import ConfigError
from encdec.models import preset
from encdec.models.loss import CHUNK_LOGITS, LinearHead, chunked_loss, compute_loss


def measure(way: str, vocab: int, rows: int, width: int, steps: int, device: str, chunk: int) -> dict:
    """One way's median ms and peak memory (MiB above the inputs) for a head of `vocab` x `width` over `rows`."""
    torch.manual_seed(0)
    cfg = preset("t5-tiny", vocab_size=vocab, d_model=width)
    weight = torch.randn(vocab, width, device=device, requires_grad=True)
    hidden = torch.randn(1, rows, width, device=device, requires_grad=True)  # (1, N, C)
    labels = torch.randint(0, vocab, (1, rows), device=device)
    head = lambda h: h @ weight.T  # noqa: E731  (n, C) -> (n, V)
    base = torch.cuda.memory_allocated() if device == "cuda" else current_rss()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        if way == "whole":
            loss = compute_loss(head(hidden), labels, {}, cfg)
        else:  # by blocks: made again in the backward pass (any head), or gradients formed as they go (a product)
            blocks_head = head if way == "recomputed" else LinearHead(weight, 1.0)
            loss = chunked_loss(hidden, blocks_head, labels, {}, cfg, chunk=chunk)
        loss.total.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        weight.grad = hidden.grad = None
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if device == "cuda" else peak * 1024  # ru_maxrss: KiB on Linux
    return {"ms": statistics.median(times), "peak_mib": (peak - base) / 2**20, "loss": loss.ce.item()}


def current_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def same_encdec() -> dict[str, str]:
    """The environment of a child process that imports this process's encdec (a checkout's, not an install's)."""
    paths = [str(Path(encdec.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    vocab = whole_number(2, 1 << 21, "--vocab")
    parser.add_argument(
        "--vocab",
        type=lambda text: [vocab(v) for v in text.split(",")],
        default="32000,256000",
        help="comma-separated vocabulary sizes",
    )
    parser.add_argument("--rows", type=whole_number(1, 1 << 20, "--rows"), default=2048, help="N: batch x target")
    parser.add_argument("--width", type=whole_number(1, 1 << 16, "--width"), default=512, help="C: the head's input")
    parser.add_argument("--steps", type=whole_number(1, 100, "--steps"), default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--chunk", type=whole_number(1, 1 << 31, "--chunk"), default=CHUNK_LOGITS, help="logits a block holds"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: way,vocab
    try:
        args = parser.parse_args()
    except ConfigError as error:  # a number out of its declared range: one sentence, argparse's exit
        parser.error(str(error))
    if args.one:
        way, vocab = args.one.split(",")
        print(json.dumps(measure(way, int(vocab), args.rows, args.width, args.steps, args.device, args.chunk)))
        return
    print(f"rows {args.rows}, width {args.width}, blocks of {args.chunk:,} logits, {args.device}, ", end="")
    print(f"{torch.get_num_threads()} threads")
    print(f"{'vocab':>8} {'way':>10} {'ms':>9} {'peak MiB':>9} {'ce':>8}")
    for vocab in args.vocab:
        for way in ("whole", "recomputed", "formed"):
            command = [sys.executable, __file__, "--one", f"{way},{vocab}", "--rows", str(args.rows)]
            command += ["--width", str(args.width), "--steps", str(args.steps), "--device", args.device]
            command += ["--chunk", str(args.chunk)]
            child = subprocess.run(command, check=True, capture_output=True, text=True, env=same_encdec())
            figures = json.loads(child.stdout)
            print(f"{vocab:>8} {way:>10} {figures['ms']:>9.1f} {figures['peak_mib']:>9.0f} {figures['loss']:>8.4f}")


if __name__ == "__main__":
    main()
