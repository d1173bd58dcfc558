"""The memory `n` samples of one source hold: the cross-attention keys and values of a decode state, in
`generate` and in a server's running batch, and a step's time with them shared or copied per row.

Run: python benchmarks/bench_shared_memory.py [--shape t5-small] [--source 512] [--samples 8] [--steps 16]
                                             [--others 31]

Printed, for one source of `--source` tokens and `--samples` rows, on a random-weight T5 of `--shape`
(generate_systems.SHAPES), fp32 on the CPU, one thread:
  - memory MiB: the cross-attention keys and values (every decoder layer's) held by `model.start(src, mask,
    new, n)`'s state, as `generate(num_return_sequences=n)` makes it, and by a server's running batch
    after the request's n rows joined it (`RunningBatch.join(model.start(...), [n])`, as the scheduler
    joins them);
  - step ms: the median time of a decoder step of the n rows over `--steps` steps (aligned, as `generate`
    steps), with the memory shared by the n rows (groups n: one memory row, their queries folded together)
    and with the same keys and values copied once per row (groups 1), and the largest difference of their
    logits;
  - batch step ms: the median time of a step of the running batch (rows at columns of their own, as the
    server steps) holding the request's n rows alone, and beside `--others` requests of one row each (other
    sources of the same length): the mix in which the n rows' second pass over their memory row (see
    attention.MemoryReaders) runs beside the others' one.
docs/shared_memory.md reads these figures.
"""

import argparse
import statistics
import time

import torch
from generate_systems import SHAPES, build_pair

from encdec.modules.decode_state import DecodeState
from encdec.modules.running_batch import RunningBatch

MIB = 2**20


def memory_mib(state: DecodeState) -> float:
    """The cross-attention keys and values `state` holds, in MiB."""
    tensors = [t for cache in state.bag.memory for t in (cache.stored_keys, cache.values)]
    return sum(t.numel() * t.element_size() for t in tensors) / MIB


def copied_per_row(state: DecodeState, mask: torch.Tensor) -> DecodeState:
    """`state` (groups n) with its memory copied once per row (groups 1), as the running batch holds it."""
    n = state.groups
    keys_values = []
    for cache in state.memory:
        keys = cache.stored_keys.transpose(-1, -2) if cache.transposed else cache.stored_keys
        keys_values.append((keys.repeat_interleave(n, 0), cache.values.repeat_interleave(n, 0)))
    state.set_memory(keys_values, mask.repeat_interleave(n, 0))
    return state


def step_ms(model, state: DecodeState, tokens: torch.Tensor, steps: int) -> tuple[float, list[torch.Tensor]]:
    """The median ms of `steps` decoder steps of `state`'s rows, and each step's logits."""
    times, logits = [], []
    for _ in range(steps):
        state.ensure(1)
        begin = time.perf_counter()
        logits.append(model.step_logits(tokens, state))
        times.append(time.perf_counter() - begin)
        state.advance(1)
    return statistics.median(times) * 1e3, logits


def batch_step_ms(model, sources: list[torch.Tensor], copies: list[int], new: int, steps: int) -> float:
    """The median ms of `steps` steps of a running batch the requests (`sources`, `copies` rows each) joined."""
    batch = RunningBatch("cpu", torch.float32)
    for source, count in zip(sources, copies):
        batch.join(model.start(source, torch.ones_like(source, dtype=torch.bool), new), [count])
    tokens = torch.randint(2, 100, (batch.rows, 1))
    return step_ms(model, batch, tokens, steps)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="t5-small", choices=sorted(SHAPES))
    parser.add_argument("--source", type=int, default=512)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--others", type=int, default=31)
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, model = build_pair(args.shape, torch.device("cpu"), torch.float32)
    n, new = args.samples, args.steps + 1
    torch.manual_seed(0)
    src = torch.randint(2, 100, (1, args.source))
    mask = torch.ones(1, args.source, dtype=torch.bool)
    tokens = torch.randint(2, 100, (n, 1))
    with torch.inference_mode():
        shared = model.start(src, mask, new, n)
        batch = RunningBatch("cpu", torch.float32)
        batch.join(model.start(src, mask, new), [n])
        print(f"{args.shape}, a source of {args.source} tokens, {n} samples: cross-attention keys and values")
        print(f"  generate's state (groups {shared.groups}):    {memory_mib(shared):7.1f} MiB")
        print(f"  the server's running batch ({batch.rows} rows): {memory_mib(batch):7.1f} MiB")
        shared_ms, shared_logits = step_ms(model, shared, tokens, args.steps)
        copied = copied_per_row(model.start(src, mask, new, n), mask)
        copied_ms, copied_logits = step_ms(model, copied, tokens, args.steps)
    gap = max((a - b).abs().max().item() for a, b in zip(shared_logits, copied_logits))
    print(f"  step of {n} rows: shared {shared_ms:.2f} ms, copied per row {copied_ms:.2f} ms (medians of {args.steps})")
    print(f"  largest logit difference, shared against copied: {gap:.2e}")
    others = [torch.randint(2, 100, (1, args.source)) for _ in range(args.others)]
    with torch.inference_mode():
        alone = batch_step_ms(model, [src], [n], new, args.steps)
        mixed = batch_step_ms(model, [src, *others], [n] + [1] * args.others, new, args.steps)
    print(f"  running batch step: {n} rows {alone:.2f} ms; beside {args.others} one-row requests {mixed:.2f} ms")


if __name__ == "__main__":
    main()
