"""Serving benchmark: continuous batching (encdec serve's scheduler) beside one-at-a-time, static batching and
CTranslate2, under closed-loop load from 1, 8, 32 and 128 clients.

Run: python benchmarks/bench_serve.py [--clients 1,8,32,128] [--rows 8,32,128] [--repeats 3] [--shape t5-small]
                                      [--device cpu]

Each of `--clients` threads sends requests back to back, as clients of a server do, taking the next
request as soon as its last one is answered; a round serves max(32, 4 x clients) requests. A request
is a Multi30k test sentence (test_2016_flickr, English) tokenized by Mistral's SentencePiece model,
and its output length is its German reference's length in the same tokens (min_new_tokens =
max_new_tokens: on random weights every system then makes exactly the same tokens, greedy, and a
request's length is as long as a translation of it would be). The model is a random-weight T5 of
`--shape` ("t5-small": d_model 512, 6 + 6 layers, vocabulary 32,128; "small": d_model 256, 4 + 4; "host":
d_model 64, 2 + 2, vocabulary 1,024, small enough that a step's time is mostly the host's work around it).
Systems:

    one-at-a-time   each request's generate alone, one after another (the same server limited to one request)
    static          a batcher takes every waiting request (up to the client count, after a 10 ms window),
                    runs one generate over the padded batch to its longest output, then answers them all
    continuous      encdec's Scheduler: requests join the running batch at the next step and leave when done
    ct2 static      CTranslate2's Translator (the same weights, converted; in a process of its own, one
                    translate_batch at a time with max_batch_size = the client count) behind the same batcher;
                    where ctranslate2 is installed (the `bench` extra)

All of encdec's passes run in the scheduler's thread (serving.scheduler says why one thread computes).
Printed per client count and system: requests/s, new tokens/s, p50 / p95 / p99 latency (a request's send to
its answer) and peak memory (CPU: the serving process's peak resident set during the round, in MiB;
CUDA: torch's peak allocation), medians over `--repeats` rounds that alternate between the systems. The
HTTP layer is left out: each system is called in-process (tests/serving/test_server.py checks the served
outputs equal generate's).

Then, per `--rows` count R, a step at R rows: R greedy requests of STEP_TOKENS new tokens each, sent together
to continuous batching and to the static batcher (one generate over the R of them), and over the decoder
steps taken at R rows, the medians of the host time between one forward's end and the next one's start (the
scheduler's or generate's own work: its bookkeeping, each row's next token, the rows that finish) and of
the model's forward pass; continuous batching's host time should not grow with R. Beside them, the greedy token
choice alone at R rows (the argmax over R x V logits and its copy to the host): on a CPU it is compute inside the
host time that grows with R whatever the bookkeeping, so the host time less it is printed as well.
"""

import argparse
import gzip
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Annotated

import torch

from encdec.errors import ConfigError
from encdec.generation.generate import generate
from encdec.generation.search import argmax
from encdec.schema import Range, argument_type
from encdec.serving.scheduler import Scheduler

sys.path.insert(0, str(Path(__file__).parent))
from generate_systems import SHAPES, build_pair, ctranslate2_systems  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MULTI30K = Path("translation") / "multi30k"
TOKENIZER = Path("tokenizers") / "mistral_tokenizer.model.v1"
MOST_CLIENTS = 4096  # client threads a round may start
WINDOW = 0.010  # a static batcher's wait for more requests after the first
# Between two samples of the peak resident set: a sampler thread takes the GIL from the thread that computes
# each time it wakes, and every 2 ms it cost both batching systems 10-15% of their requests/s at 32 clients.
SAMPLE_EVERY = 0.025
STEP_TOKENS = 96  # new tokens of each request of a --rows measurement (the last ones join some steps after the first)


def workload(data: Path, vocab: int) -> list[tuple[torch.Tensor, int]]:
    """(source ids (1, S), output length) of every Multi30k 2016 test pair, in Mistral's SentencePiece tokens
    (ids past the model's vocabulary folded into it)."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(data / TOKENIZER))

    def lines(language):
        with gzip.open(data / MULTI30K / f"test_2016_flickr.{language}.gz", "rt") as f:
            return [line.strip() for line in f]

    pairs = zip(sp.encode(lines("en")), sp.encode(lines("de")))
    return [(torch.tensor([[2 + i % (vocab - 2) for i in en]]), len(de) + 1) for en, de in pairs]


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


class Static:
    """Batches of whatever waits (after a WINDOW, up to `most`), each run by `run_batch(src, mask, length)` to its
    longest output before the next begins."""

    def __init__(self, run_batch, most: int):
        self.run_batch, self.most, self.waiting = run_batch, most, queue.Queue()
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
            ids, mask = padded_batch([s["source"] for s in batch])
            out = self.run_batch(ids, mask, max(s["length"] for s in batch))
            for i, s in enumerate(batch):
                s["out"] = out[i : i + 1, : 1 + s["length"]]
                s["done"].set()


def padded_batch(sources: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources (1, S) of their own lengths -> ids and mask (B, longest), padded on the right."""
    width, device = max(source.shape[1] for source in sources), sources[0].device
    ids = torch.zeros(len(sources), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(sources), width, dtype=torch.bool, device=device)
    for i, source in enumerate(sources):
        ids[i, : source.shape[1]], mask[i, : source.shape[1]] = source[0], True
    return ids, mask


class PeakMemory:
    """The peak resident set (MiB) of the processes `pids` while in the `with` block, sampled every SAMPLE_EVERY
    seconds; on CUDA, torch's peak allocation."""

    def __init__(self, device: torch.device, pids: list[int]):
        self.device, self.pids = device, pids

    def __enter__(self):
        self.peak, self.stop = 0.0, threading.Event()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.thread = threading.Thread(target=self.sample, daemon=True)
            self.thread.start()
        return self

    def sample(self):
        while not self.stop.wait(SAMPLE_EVERY):
            self.peak = max(self.peak, sum(resident_mib(pid) for pid in self.pids))

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            self.stop.set()
            self.thread.join()


def resident_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def step_times(model, run, rows: int) -> tuple[float, float, int]:
    """(host ms, forward ms, steps): medians over the decoder steps at `rows` rows that `run()` makes `model` take,
    of the time between one forward's end and the next one's start (consecutive steps at `rows` rows: the
    search's and the scheduler's own work) and of the forward itself (on CUDA waited for, so that the host
    time is the rest's own)."""
    marks, forward = [], model.step

    def timed(tokens, state):
        started = time.perf_counter()
        logits = forward(tokens, state)
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)
        marks.append((started, time.perf_counter(), state.rows))
        return logits

    model.step = timed  # an instance attribute over the model's method, for this measurement only
    try:
        run()
    finally:
        del model.step
    steps = [(a, b) for a, b in zip(marks, marks[1:]) if a[2] == rows and b[2] == rows]
    if not steps:
        return float("nan"), float("nan"), 0
    host = statistics.median(b[0] - a[1] for a, b in steps)
    return 1e3 * host, 1e3 * statistics.median(a[1] - a[0] for a, _ in steps), len(steps)


def steps_at(scheduler: Scheduler, run_batch, stream, rows: int) -> dict[str, tuple[float, float, int]]:
    """step_times of continuous batching (`rows` greedy requests of STEP_TOKENS new tokens each, sent together)
    and of a static batch of the same `rows` sources (`run_batch`, the static batcher's generate)."""
    requests = [(stream[i % len(stream)][0], STEP_TOKENS) for i in range(rows)]
    submit = lambda source, length: scheduler.run(source, None, options(length))  # noqa: E731
    ids, mask = padded_batch([source for source, _ in requests])
    return {
        "continuous": step_times(scheduler.model, lambda: drive(submit, requests, rows), rows),
        "static": step_times(scheduler.model, lambda: run_batch(ids, mask, STEP_TOKENS), rows),
    }


def choice_ms(device: torch.device, rows: int, vocab: int, repeats: int = 50) -> float:
    """The greedy token choice alone at `rows` rows (generation.search.argmax over (rows, V) logits, what a
    greedy step reads whatever its bookkeeping): the median of `repeats` timings in ms. On a CPU this part of
    the host time is compute that grows with the rows; on a GPU it is queued beside the forward."""
    logits = torch.randn(rows, vocab, device=device)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        argmax(logits).tolist()  # the step's one copy to the host included
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def checked(annotation, flag: str):
    """An argparse type for `flag`, declared as `annotation` and checked as encdec checks its own options; a
    refusal is argparse's one-line error."""
    parse = argument_type(annotation, flag)

    def check(text: str):
        try:
            return parse(text)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return check


def counts_of(flag: str):
    """An argparse type for `flag`: comma-separated counts of 1 to MOST_CLIENTS."""
    one = checked(Annotated[int, Range(1, MOST_CLIENTS)], flag)
    return lambda text: [one(count) for count in text.split(",")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--clients", type=counts_of("--clients"), default="1,8,32,128", help="client counts, comma-separated"
    )
    parser.add_argument(
        "--rows", type=counts_of("--rows"), default="8,32,128", help="row counts of the per-step times, comma-separated"
    )
    parser.add_argument("--repeats", type=checked(Annotated[int, Range(1, 100)], "--repeats"), default=3)
    parser.add_argument("--shape", choices=SHAPES, default="t5-small")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=checked(Annotated[int, Range(1, 1024)], "--threads"), default=None)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder (Multi30k, the tokenizer)")
    parser.add_argument("--no-ctranslate2", action="store_true", help="leave CTranslate2 out even if installed")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU")
    needed = [args.data / MULTI30K / f"test_2016_flickr.{language}.gz" for language in ("en", "de")]
    if not all(path.is_file() for path in [*needed, args.data / TOKENIZER]):
        parser.error(f"--data {args.data}: no Multi30k test sentences and Mistral tokenizer there")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    counts = args.clients
    made = {}

    def load():  # in the scheduler's thread: the one thread that computes
        made["reference"], model = build_pair(args.shape, device, torch.float32)
        return model

    scheduler = Scheduler(load, max_rows=max(64, *counts, *args.rows))
    model = scheduler.model
    stream = [(s.to(device), n) for s, n in workload(args.data, SHAPES[args.shape]["vocab_size"])]

    def one(source, length):
        return scheduler.exclusive(lambda: generate(model, source, None, **options(length)))

    def batch(ids, mask, length):
        return scheduler.exclusive(lambda: generate(model, ids, mask, **options(length)))

    threads = torch.get_num_threads()
    converted = lambda: ctranslate2_systems(made["reference"], device, "fp32", threads)  # noqa: E731
    ct2 = None if args.no_ctranslate2 else scheduler.exclusive(converted).get("ct2")
    print(
        f"shape {args.shape}, {args.device}, {torch.get_num_threads()} threads, Multi30k test_2016_flickr "
        f"({len(stream)} sources), medians of {args.repeats}"
    )
    print(
        f"{'clients':>7} {'system':<14} {'requests/s':>10} {'tokens/s':>9} {'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'peak MiB':>8}"
    )
    for clients in counts:
        requests = [stream[i % len(stream)] for i in range(max(32, 4 * clients))]
        systems = {
            "one-at-a-time": one,
            "static": Static(batch, clients),
            "continuous": lambda source, length: scheduler.run(source, None, options(length)),
        }
        if ct2 is not None:
            systems["ct2 static"] = Static(lambda ids, mask, length: ct2(ids, mask, options(length)), clients)
        drive(systems["continuous"], requests[:clients], clients)  # warm-up: kernels, buffers
        results = {name: [] for name in systems}
        for _ in range(args.repeats):
            for name, submit in systems.items():
                share = requests if name != "one-at-a-time" else requests[: max(clients, len(requests) // 4)]
                pid = ct2.worker.process.pid if name == "ct2 static" else os.getpid()
                with PeakMemory(device if name != "ct2 static" else torch.device("cpu"), [pid]) as peak:
                    seconds, latencies = drive(submit, share, clients)
                tokens = sum(n for _, n in share)
                quantiles = [percentile(latencies, q) for q in (0.5, 0.95, 0.99)]
                results[name].append((len(share) / seconds, tokens / seconds, *quantiles, peak.peak))
        table = {name: [statistics.median(column) for column in zip(*rows)] for name, rows in results.items()}
        for name, (rps, tps, p50, p95, p99, mib) in table.items():
            print(f"{clients:>7} {name:<14} {rps:>10.2f} {tps:>9.0f} {p50:>7.2f} {p95:>7.2f} {p99:>7.2f} {mib:>8.0f}")
        continuous = table["continuous"][0]
        print(
            f"{clients:>7} continuous / one-at-a-time: {continuous / table['one-at-a-time'][0]:.2f}x requests/s; "
            f"/ static: {continuous / table['static'][0]:.2f}x"
            + (f"; / ct2 static: {continuous / table['ct2 static'][0]:.2f}x" if ct2 is not None else ""),
            flush=True,
        )
    print(
        f"a step at R rows ({STEP_TOKENS} new tokens a request, greedy), medians: host ms, forward ms, steps; then the "
        "token choice alone (argmax over R x V logits), ms"
    )
    print(f"{'rows':>7} {'continuous':>22} {'static':>22} {'choice':>8}")
    host, rest = {}, {}
    for rows in args.rows:
        measured = steps_at(scheduler, batch, stream, rows)
        choice = scheduler.exclusive(lambda: choice_ms(device, rows, SHAPES[args.shape]["vocab_size"]))  # noqa: B023
        host[rows] = measured["continuous"][0]
        rest[rows] = host[rows] - choice
        cells = [f"{h:>8.3f} {f:>8.3f} {n:>4}" for h, f, n in measured.values()]
        print(f"{rows:>7} {cells[0]:>22} {cells[1]:>22} {choice:>8.3f}", flush=True)
    print(f"continuous host time less the token choice: most / least {max(rest.values()) / min(rest.values()):.2f}x")
    print(f"continuous host time: most / least over the row counts {max(host.values()) / min(host.values()):.2f}x")
    scheduler.stop(timeout=60)


if __name__ == "__main__":
    main()
