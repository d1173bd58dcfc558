"""Serving benchmark: continuous batching (encdec serve's scheduler) beside one-at-a-time and static batching.

Run: python benchmarks/bench_serve.py [--clients 32] [--requests 128] [--repeats 3] [--shape small] [--device cpu]

`--clients` threads each send requests back to back, as clients of a server would, taking the next of
`--requests` requests as soon as their last one is answered. A request is a source of 8 to 40 random
tokens and an output length of 8 to 64 tokens drawn at random (min_new_tokens = max_new_tokens, so every
system makes exactly the same tokens; greedy). Systems, all on the same random-weight T5 (`--shape` as
in bench_generate.py: "small" d_model 256, 4 + 4 layers; "t5-small"):

    one-at-a-time   each request's generate alone, one after another (what a server without batching does)
    static          a batcher takes every waiting request (up to --clients, after a 10 ms window), runs one
                    generate over the padded batch to its longest output, then answers them all together
    continuous      encdec's Scheduler: requests join the running batch at the next step and leave when done

Printed per system: requests/s, generated tokens/s, and the median and 99th-percentile latency (from a
request's send to its answer), medians over `--repeats` rounds that alternate between the systems. The
HTTP layer is left out: each system is called in-process, so the table compares scheduling alone
(tests/serving/test_server.py checks the served outputs equal generate's).
"""

import argparse
import queue
import random
import statistics
import threading
import time

import torch

import encdec
from encdec.generation.generate import generate
from encdec.serving.scheduler import Scheduler

SHAPES = {
    "small": dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=4, n_decoder_layers=4, vocab_size=8192),
    "t5-small": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6, n_decoder_layers=6, vocab_size=32128),
}
WINDOW = 0.010  # static batching's wait for more requests after the first


def workload(n: int, vocab: int, seed: int = 0) -> list[tuple[torch.Tensor, int]]:
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randint(2, vocab, (1, rng.randint(8, 40)), generator=generator), rng.randint(8, 64)) for _ in range(n)
    ]


def options(length: int) -> dict:
    return {"max_new_tokens": length, "min_new_tokens": length}


def drive(submit, requests, clients: int) -> tuple[float, list[float]]:
    """(wall seconds, latencies) of `clients` threads sending `requests` back to back through `submit`."""
    latencies, lock, next_index = [], threading.Lock(), [0]

    def client():
        while True:
            with lock:
                if next_index[0] >= len(requests):
                    return
                index = next_index[0]
                next_index[0] += 1
            started = time.perf_counter()
            submit(*requests[index])
            with lock:
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies


class OneAtATime:
    def __init__(self, model):
        self.model, self.lock = model, threading.Lock()

    def __call__(self, source, length):
        with self.lock:
            return generate(self.model, source, None, **options(length))


class Static:
    """Batches of whatever waits (after a WINDOW), each run to its longest output before the next begins."""

    def __init__(self, model, most: int):
        self.model, self.most, self.waiting = model, most, queue.Queue()
        threading.Thread(target=self.loop, daemon=True).start()

    def __call__(self, source, length):
        done = threading.Event()
        slot = {"source": source, "length": length, "done": done}
        self.waiting.put(slot)
        done.wait()
        return slot["out"]

    def loop(self):
        while True:
            batch = [self.waiting.get()]
            deadline = time.perf_counter() + WINDOW
            while len(batch) < self.most and (left := deadline - time.perf_counter()) > 0:
                try:
                    batch.append(self.waiting.get(timeout=left))
                except queue.Empty:
                    break
            width = max(s["source"].shape[1] for s in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros(len(batch), width, dtype=torch.bool)
            for i, s in enumerate(batch):
                ids[i, : s["source"].shape[1]], mask[i, : s["source"].shape[1]] = s["source"][0], True
            out = generate(self.model, ids, mask, **options(max(s["length"] for s in batch)))
            for i, s in enumerate(batch):
                s["out"] = out[i : i + 1, : 1 + s["length"]]
                s["done"].set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shape", choices=SHAPES, default="small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape = SHAPES[args.shape]
    model = encdec.build_model(encdec.preset("t5-small", **shape, pad_id=0, eos_id=1, decoder_start_id=0))
    model = model.eval().to(args.device)
    requests = [(s.to(args.device), n) for s, n in workload(args.requests, shape["vocab_size"])]
    scheduler = Scheduler(model, max_rows=max(64, args.clients))
    systems = {"one-at-a-time": OneAtATime(model), "static": Static(model, args.clients), "continuous": scheduler.run}
    submit = {
        "one-at-a-time": systems["one-at-a-time"],
        "static": systems["static"],
        "continuous": lambda source, length: scheduler.run(source, None, options(length)),
    }
    drive(submit["continuous"], requests[: args.clients], args.clients)  # warm-up: kernels, buffers
    results = {name: [] for name in submit}
    for _ in range(args.repeats):
        for name, fn in submit.items():
            share = requests if name != "one-at-a-time" else requests[: max(args.clients, len(requests) // 4)]
            seconds, latencies = drive(fn, share, args.clients)
            tokens = sum(n for _, n in share)
            latencies.sort()
            p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
            results[name].append((len(share) / seconds, tokens / seconds, statistics.median(latencies), p99))
    scheduler.stop(timeout=60)
    print(
        f"{args.clients} clients, {args.requests} requests, shape {args.shape}, {args.device}, "
        f"{torch.get_num_threads()} threads, medians of {args.repeats}"
    )
    print(f"{'system':<15} {'requests/s':>10} {'tokens/s':>9} {'p50 s':>7} {'p99 s':>7}")
    table = {name: [statistics.median(column) for column in zip(*rows)] for name, rows in results.items()}
    for name, (rps, tps, p50, p99) in table.items():
        print(f"{name:<15} {rps:>10.2f} {tps:>9.0f} {p50:>7.2f} {p99:>7.2f}")
    continuous = table["continuous"][0]
    print(
        f"continuous / one-at-a-time: {continuous / table['one-at-a-time'][0]:.2f}x requests/s; "
        f"continuous / static: {continuous / table['static'][0]:.2f}x"
    )


if __name__ == "__main__":
    main()
