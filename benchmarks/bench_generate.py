"""Generation benchmark: encdec.generate beside Hugging Face's generate() on the same random-weight T5.

Run: python benchmarks/bench_generate.py [--repeats 5] [--threads N] [--quantize int8] [--bf16] [--compile]
     python benchmarks/bench_generate.py --device cuda --dtype bf16 --shape t5-small --batch 8,64

Shapes (`--shape`): "small" (the default: d_model 256, 4 heads of 64, d_ff 1024, 4 + 4
layers, vocabulary 8,192) and "t5-small" (d_model 512, 8 heads, d_ff 2048, 6 + 6
layers, vocabulary 32,128), both T5 v1.0 layouts. Each batch of `--batch` (default 8)
holds sources of 256 tokens, and every run makes exactly 64 new tokens per example
(min_new_tokens = max_new_tokens = 64 on all sides). For greedy, beam search (4 beams)
and sampling it prints new tokens per second (examples x 64 / wall time, encoder
included) per system, encdec's ratio to HF, and the share of output tokens equal to
HF's (greedy and beam; sampling is seeded, not compared). Runs alternate between the
systems and the table shows medians.

Systems: HF and encdec in `--dtype` (fp32, or bf16 by casting both models' weights)
on `--device`; with `--quantize int8` (fp32 on the CPU: fbgemm's kernels; fp32 or bf16 on
CUDA: torch._int_mm), encdec with int8 linear layers (encdec.quantize); with `--bf16` (fp32 runs),
"encdec bf16": the same weights cast to bf16, what `--dtype auto` decodes in on a CPU that multiplies bf16
natively, timed in turn with the fp32 systems (its ratio to encdec fp32 printed); with `--compile`,
"encdec compiled": generate(compile=True), fixed-shape decoding steps compiled (CPU) or
CUDA-graphed (GPU), its first call per shape (the compile) left out of the timings and
printed apart; with `ctranslate2` installed (the `bench` extra), the same weights
converted by its TransformersConverter and run in a process of its own
(benchmarks/ct2_worker.py says why), with compute type fp32/bf16 as --dtype and,
on the CPU, int8 too (its intra-op threads set to torch's). On CUDA every call is
synchronised before and after. With CTranslate2, "encdec's best / CT2's best" is the fastest
encdec system of the row over the fastest CTranslate2 compute type. The peak memory of each torch system's generate call
above what was allocated before it is shown: on CUDA torch.cuda.max_memory_allocated
over the timed calls; on the CPU the peak of torch's allocations during one more,
untimed call under the profiler (profile_memory). Both count what torch allocates
during the call, not weight copies made once per model before it (the warm-up makes
them: oneDNN's reordered and BLAS's transposed weights, see modules/decoding_linear.py).

On the CPU in fp32, a second table bounds what any implementation on torch's kernels could
reach: it replays only the matrix products and attention kernels of one generate call (the
model's own weights, the same shapes, each product on the fastest of F.linear, BLAS on a
transposed weight and oneDNN on a prepacked one, each attention on the fastest of SDPA and
two batched products) and nothing else, beside CTranslate2 fp32's whole call when it ran.
"""

import argparse
import copy
import statistics
import time

import torch
import transformers
from generate_systems import (
    DTYPES,
    SHAPES,
    build_pair,
    cpu_peak_mib,
    ctranslate2_systems,
    encdec_system,
    hf_system,
    int8_copy,
    kernel_floor,
    timed,
)

from encdec.cpu_features import cpu_features, isa_limits

SOURCE, NEW = 256, 64
WARMUP: dict[str, float] = {}  # seconds of each system's last warm-up call
MODES = {
    "greedy": dict(),
    "beam 4": dict(num_beams=4),
    "sampling": dict(do_sample=True, top_k=50, top_p=0.95),
}


def measure(systems: dict, src, mask, options: dict, repeats: int, device: torch.device) -> dict:
    """{name: (seconds median, output ids, peak MiB or None)} over `repeats` interleaved rounds after a warm-up."""
    options = dict(options, max_new_tokens=NEW, min_new_tokens=NEW)
    times, outputs, peaks = {name: [] for name in systems}, {}, {name: 0.0 for name in systems}
    for name, fn in systems.items():
        start = time.perf_counter()
        fn(src, mask, options)  # warm-up (and the compile of compiled systems)
        WARMUP[name] = time.perf_counter() - start
    for _ in range(repeats):
        for name, fn in systems.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
            seconds, outputs[name] = timed(lambda fn=fn: sync(fn(src, mask, options), device))
            times[name].append(seconds)
            if device.type == "cuda":
                peaks[name] = max(peaks[name], (torch.cuda.max_memory_allocated(device) - before) / 2**20)
    if device.type == "cpu":  # one more call each, untimed, under the profiler
        peaks = {name: cpu_peak_mib(lambda fn=fn: fn(src, mask, options)) for name, fn in systems.items()}
    return {
        name: (statistics.median(times[name]), outputs[name], None if name.startswith("ct2") else peaks[name])
        for name in systems
    }


def sync(out, device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out


def same_share(a: torch.Tensor, b: torch.Tensor) -> str:
    """The share of tokens equal in two outputs of the same shape, as the table shows it."""
    if a.shape != b.shape:
        return "shape differs"
    share = (a == b).float().mean().item()
    return "yes" if share == 1.0 else f"{share:.0%}"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per system and mode (median shown)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=list(DTYPES), default="fp32", help="weights of HF and encdec (and CT2's)")
    parser.add_argument("--shape", choices=list(SHAPES), default="small")
    parser.add_argument("--batch", default="8", help="comma-separated batch sizes, e.g. 8,64")
    parser.add_argument("--quantize", choices=("int8",), default=None, help="add encdec with int8 linear layers")
    parser.add_argument("--compile", action="store_true", help="add encdec with generate(compile=True)")
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="add encdec with bf16 weights beside the fp32 systems (--dtype auto's choice)",
    )
    parser.add_argument("--no-ctranslate2", action="store_true", help="leave CTranslate2 out even if installed")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernels-alone table (CPU fp32)")
    args = parser.parse_args(argv)
    args.batch = [int(b) for b in args.batch.split(",")]
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU")
    if args.quantize and args.device == "cpu" and args.dtype != "fp32":
        parser.error("--quantize int8 on the CPU needs --dtype fp32 (fbgemm's int8 kernels take fp32)")
    if args.bf16 and args.dtype != "fp32":
        parser.error("--bf16 adds a bf16 encdec beside fp32 systems: it needs --dtype fp32")
    return args


def header(systems: list[str], int8: bool) -> str:
    cells = ["batch", "mode", *(f"{name} tok/s" for name in systems), "encdec / HF"]
    cells += ["encdec compiled / HF"] if "encdec compiled" in systems else []
    cells += ["encdec int8 / HF"] if int8 else []
    cells += ["encdec int8 / CT2 int8"] if int8 and "ct2 int8" in systems else []
    cells += ["encdec bf16 / encdec"] if "encdec bf16" in systems else []
    cells += ["encdec / CT2"] if "ct2" in systems else []
    cells += ["encdec compiled / CT2"] if "ct2" in systems and "encdec compiled" in systems else []
    cells += ["encdec's best / CT2's best"] if "ct2" in systems else []
    cells += [f"{name} same tokens as HF" for name in systems if name != "hf"]
    cells += [f"{name} peak MiB" for name in systems if not name.startswith("ct2")]
    return "| " + " | ".join(cells) + " |\n|" + "|".join("---" for _ in cells) + "|"


def row(batch: int, mode: str, r: dict, seeded: bool) -> str:
    rate = {name: batch * NEW / seconds for name, (seconds, _, _) in r.items()}
    cells = [str(batch), mode, *(f"{rate[name]:.1f}" for name in r), f"{rate['encdec'] / rate['hf']:.2f}x"]
    if "encdec compiled" in r:
        cells.append(f"{rate['encdec compiled'] / rate['hf']:.2f}x")
    if "encdec int8" in r:
        cells.append(f"{rate['encdec int8'] / rate['hf']:.2f}x")
        if "ct2 int8" in r:
            cells.append(f"{rate['encdec int8'] / rate['ct2 int8']:.2f}x")
    if "encdec bf16" in r:
        cells.append(f"{rate['encdec bf16'] / rate['encdec']:.2f}x")
    if "ct2" in r:
        cells.append(f"{rate['encdec'] / rate['ct2']:.2f}x")
        if "encdec compiled" in r:
            cells.append(f"{rate['encdec compiled'] / rate['ct2']:.2f}x")
        best = {system: max(v for name, v in rate.items() if name.startswith(system)) for system in ("encdec", "ct2")}
        cells.append(f"{best['encdec'] / best['ct2']:.2f}x")
    cells += ["seeded" if seeded else same_share(r["hf"][1], out) for name, (_, out, _) in r.items() if name != "hf"]
    cells += [f"{peak:.1f}" for _, (_, _, peak) in r.items() if peak is not None]
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    reference, ours = build_pair(args.shape, device, dtype)
    systems = {"hf": hf_system(reference), "encdec": encdec_system(ours)}
    if args.compile:
        systems["encdec compiled"] = encdec_system(ours, compile=True)
    if args.quantize:
        systems["encdec int8"] = encdec_system(int8_copy(ours))
    if args.bf16:
        systems["encdec bf16"] = encdec_system(copy.deepcopy(ours).to(torch.bfloat16))
    if not args.no_ctranslate2:
        systems.update(ctranslate2_systems(reference, device, args.dtype, torch.get_num_threads()))
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads ({cpu_features().describe()}; {isa_limits()})"
    )
    print(
        f"T5 shape {args.shape}; batch {args.batch} x {SOURCE} source tokens, {NEW} new tokens; {args.dtype} "
        f"on {where}; torch {torch.__version__}, transformers {transformers.__version__}; "
        f"median of {args.repeats}"
    )
    print(header(list(systems), bool(args.quantize)))
    vocab = SHAPES[args.shape]["vocab_size"]
    done, compiles = [], []
    for batch in args.batch:
        torch.manual_seed(1)
        src = torch.randint(2, vocab, (batch, SOURCE), device=device)
        mask = torch.ones(batch, SOURCE, dtype=torch.long, device=device)
        for mode in args.modes:
            r = measure(systems, src, mask, MODES[mode], args.repeats, device)
            print(row(batch, mode, r, MODES[mode].get("do_sample", False)), flush=True)
            if args.compile:
                compiles.append(f"batch {batch} {mode}: {WARMUP['encdec compiled']:.1f} s")
            done.append((batch, mode, r))
    if compiles:
        print("\nencdec compiled, first call (compile or capture included, not timed above): " + "; ".join(compiles))
    if device.type == "cpu" and args.dtype == "fp32" and not args.no_kernels:
        kernels_table(ours, done, args.repeats)


def kernels_table(ours, done: list, repeats: int) -> None:
    """The kernels-alone bound of each row in `done`, beside HF's and encdec's time and CTranslate2 fp32's
    when it ran: where its whole call takes no longer than the kernels, no implementation on them beats it."""
    ct2 = all("ct2" in r for _, _, r in done)
    print(
        "\nKernels alone: the matrix products and attention of one call and nothing else, each on torch's fastest "
        "CPU kernel (a bound for any implementation built on them)"
    )
    print(
        "| batch | mode | HF ms | encdec ms | kernels ms | HF ms / 3 | kernels' ratio to HF |"
        + (" CT2 fp32 ms |" if ct2 else "")
    )
    print("|---|---|---:|---:|---:|---:|---:|" + ("---:|" if ct2 else ""))
    for batch, mode, r in done:
        hf_ms, ed_ms = r["hf"][0] * 1e3, r["encdec"][0] * 1e3
        floor_ms = kernel_floor(ours, batch, SOURCE, NEW, MODES[mode].get("num_beams", 1), repeats) * 1e3
        print(
            f"| {batch} | {mode} | {hf_ms:.1f} | {ed_ms:.1f} | {floor_ms:.1f} | {hf_ms / 3:.1f} | "
            f"{hf_ms / floor_ms:.2f}x |" + (f" {r['ct2'][0] * 1e3:.1f} |" if ct2 else "")
        )


if __name__ == "__main__":
    main()
