"""Generation benchmark: encdec.generate beside Hugging Face's generate() on the same random-weight T5.

Run: python benchmarks/bench_generate.py [--repeats 5] [--threads N]

The model is a T5 v1.0 layout with d_model 256, 4 heads of 64, d_ff 1024, 4 encoder
and 4 decoder layers and a vocabulary of 8192; the batch is 8 sources of 256
tokens; every run makes exactly 64 new tokens per example (min_new_tokens =
max_new_tokens = 64 on both sides). For greedy, beam search (4 beams) and
sampling it prints new tokens per second (examples x 64 / wall time, encoder
included) for both, the ratio, and checks that greedy and beam outputs are equal.
Runs alternate between the two libraries and the table shows medians.
"""

import argparse
import statistics
import tempfile
import time

import torch
import transformers

import encdec

SHAPE = dict(vocab_size=8192, d_model=256, d_kv=64, num_heads=4, d_ff=1024, num_layers=4, num_decoder_layers=4)
BATCH, SOURCE, NEW = 8, 256, 64
MODES = {
    "greedy": dict(),
    "beam 4": dict(num_beams=4),
    "sampling": dict(do_sample=True, top_k=50, top_p=0.95),
}


def build_pair():
    config = transformers.T5Config(**SHAPE, feed_forward_proj="relu", decoder_start_token_id=0)
    torch.manual_seed(0)
    reference = transformers.T5ForConditionalGeneration(config).eval()
    with tempfile.TemporaryDirectory() as path:
        reference.save_pretrained(path)
        ours = encdec.load_hf(path)
    return reference, ours


def timed(fn) -> tuple[float, torch.Tensor]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def run_mode(reference, ours, src, mask, options: dict, repeats: int) -> dict:
    options = dict(options, max_new_tokens=NEW, min_new_tokens=NEW)
    seeded = options.get("do_sample", False)

    def hf():
        if seeded:
            torch.manual_seed(0)
        with torch.inference_mode():
            return reference.generate(input_ids=src, attention_mask=mask, **options)

    def ed():
        return encdec.generate(ours, src, mask, **options, **({"seed": 0} if seeded else {}))

    hf(), ed()  # warm-up
    times = {"hf": [], "encdec": []}
    outputs = {}
    for _ in range(repeats):
        for name, fn in (("encdec", ed), ("hf", hf)):
            seconds, outputs[name] = timed(fn)
            times[name].append(seconds)
    assert outputs["hf"].shape[1] == outputs["encdec"].shape[1] == NEW + 1
    median = {name: statistics.median(t) for name, t in times.items()}
    return dict(
        hf=BATCH * NEW / median["hf"],
        encdec=BATCH * NEW / median["encdec"],
        equal=torch.equal(outputs["hf"], outputs["encdec"]) if not seeded else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per library and mode (median shown)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    reference, ours = build_pair()
    torch.manual_seed(1)
    src = torch.randint(2, SHAPE["vocab_size"], (BATCH, SOURCE))
    mask = torch.ones(BATCH, SOURCE, dtype=torch.long)
    print(f"T5 d_model 256, 4+4 layers, vocab 8192; batch {BATCH} x {SOURCE} source tokens, {NEW} new tokens; "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
          f"median of {args.repeats}")  # fmt: skip
    print(f"| {'mode':<9} | {'HF tokens/s':>11} | {'encdec tokens/s':>15} | {'ratio':>6} | same tokens |")
    print(f"|{'-' * 11}|{'-' * 13}|{'-' * 17}|{'-' * 8}|-------------|")
    for mode in args.modes:
        r = run_mode(reference, ours, src, mask, MODES[mode], args.repeats)
        same = {True: "yes", False: "NO", None: "n/a (seeded)"}[r["equal"]]
        print(f"| {mode:<9} | {r['hf']:>11.1f} | {r['encdec']:>15.1f} | {r['encdec'] / r['hf']:>5.2f}x | {same} |")


if __name__ == "__main__":
    main()
