"""Long inputs on this CPU: a training step (forward and backward) and greedy decoding of one source of 1k to 32k
tokens, encdec's whole-score attention against its attention by chunks (modules.chunked_attention) against
transformers' T5 (SDPA and eager); time and peak memory, each in a process of its own.

    python benchmarks/bench_long_inputs.py                          # the table of docs/benchmarks.md
    python benchmarks/bench_long_inputs.py --lengths 1024,4096 --impls chunked,hf-sdpa
    python benchmarks/bench_long_inputs.py --step-16k               # t5-small, one AdamW step at 16,384 tokens
    python benchmarks/bench_long_inputs.py --local                  # LongT5's local attention (its own table)
    python benchmarks/bench_long_inputs.py --local --attention transient_global   # LongT5's transient-global
    python benchmarks/bench_long_inputs.py --local --lengths 4096,16384 --impls local-blocks,hf-longt5 --modes train

The model is T5 v1.0's layout (relative bias) at d_model 256, 4 heads, 2 + 2 layers, vocabulary 32,128, the same
weights in every implementation; batch 1, a 64-token target, dropout 0.1, float32. Each measurement runs in a
child process that ends itself once its resident memory passes --limit-gib (default 14; a thread reads it every
20 ms), so a path that needs more says so ("out of memory") instead of taking the machine down; peak memory is
the child's peak resident set (ru_maxrss), which includes Python and torch (about 0.4 GiB). (An address-space
cap would not do: the chunked path's heap is released page by page, so its address space outgrows what it
holds.) "decode" encodes the source and writes 16 tokens.
`--step-16k` is the claim of issue 46: one training step of t5-small (60M parameters, AdamW, the trainer's
activation checkpointing of each block) on a 16,384-token source within 3 GiB.
`--local` gives the same model LongT5's local attention (keys at most 127 tokens away) and compares encdec's
whole scores masked to the band, encdec's chunks of the band (whose work, not only memory, is linear in the
input; what long inputs took before blocks), encdec's blocks of the band (modules.blocked_band, what a long
input takes) and transformers' LongT5 (its local blocks), encdec's weights copied into it; `--attention
transient_global` gives it LongT5's transient-global attention instead (the band and a summary key per block of
16 tokens), against transformers' transient-global LongT5.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

LENGTHS = (1024, 4096, 16384, 32768)
IMPLS = ("dense", "chunked", "hf-sdpa", "hf-eager")
LOCAL_IMPLS = ("local-whole", "local-chunks", "local-blocks", "hf-longt5")  # --local: LongT5's local attention
LOCAL_RADIUS = 127  # LongT5's
SHAPE = dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=2)
TARGET, NEW_TOKENS = 64, 16


def build(impl: str, attention: str = "local"):
    """The benchmark's T5 in `impl`'s implementation, weights from one seed (transformers' copied into ours);
    `attention` the encoder's for the LOCAL_IMPLS (LongT5's local or transient_global)."""
    import torch

    if impl in LOCAL_IMPLS:
        return build_local(impl, attention)
    from bench_train import hf_model  # the T5Config of an encdec config (this folder is on the path)

    import encdec
    from encdec.interop.t5.t5_layout import NAMES

    cfg = encdec.preset("t5-small", **SHAPE, dropout=0.1)
    torch.manual_seed(0)
    hf = hf_model(cfg, {"hf-sdpa": "sdpa", "hf-eager": "eager"}.get(impl, "eager"))
    if impl.startswith("hf"):
        return hf, cfg
    ours = encdec.build_model(cfg)
    state = hf.state_dict()
    ours.load_state_dict({name: state[NAMES.hf(name)] for name in ours.state_dict()})
    ours.encoder.long_scores = 0 if impl == "chunked" else 1 << 62  # by chunks always, or never
    return ours, cfg


def build_local(impl: str, attention: str = "local"):
    """The benchmark's T5 with LongT5's `attention`, local (keys at most LOCAL_RADIUS away) or transient_global
    (those and a summary key per block): encdec's whole scores masked to the band, encdec's chunks of the band
    (modules.chunked_attention), its blocks (modules.blocked_band), or transformers' LongT5 (its blocks of
    LOCAL_RADIUS + 1), encdec's weights copied into it."""
    import torch
    from transformers import LongT5Config, LongT5ForConditionalGeneration

    import encdec
    from encdec.interop.longt5 import longt5_files
    from encdec.models import encoder

    cfg = encdec.preset("t5-small", **SHAPE, dropout=0.1, encoder_attention=attention, local_radius=LOCAL_RADIUS)
    torch.manual_seed(0)
    ours = encdec.build_model(cfg)
    if impl == "hf-longt5":
        weights, config = longt5_files(ours)
        hf = LongT5ForConditionalGeneration(LongT5Config(**config))
        missing, unexpected = hf.load_state_dict(weights, strict=False)
        assert not unexpected and all("lm_head" in name or "embed_tokens" in name for name in missing), missing
        return hf, cfg
    whole = impl == "local-whole"
    encoder.BAND_SHARE = 1 << 62 if whole else 0  # the band's chunks (or blocks) never, or at every length
    if impl == "local-chunks":
        encoder.SelfMasks.blocks = lambda *args: None  # the band by chunks of query rows, as before blocks
    ours.encoder.long_scores = 1 << 62  # never by chunks for the length alone
    return ours, cfg


def measure(impl: str, length: int, mode: str, attention: str = "local") -> dict:
    """In the child: one warm-up-free measurement of `mode` (train or decode) at `length` source tokens."""
    import torch

    torch.manual_seed(1)
    model, cfg = build(impl, attention)
    src = torch.randint(3, cfg.vocab_size, (1, length))
    tgt = torch.randint(3, cfg.vocab_size, (1, TARGET))
    start = time.perf_counter()
    if mode == "train":
        model.train()
        if impl.startswith("hf"):
            loss = model(input_ids=src, labels=tgt).loss
        else:
            loss = model(src, tgt, labels=tgt).loss
        loss.backward()
    else:
        model.eval()
        with torch.no_grad():
            if impl.startswith("hf"):
                model.generate(input_ids=src, max_new_tokens=NEW_TOKENS, do_sample=False, min_length=0)
            else:
                import encdec

                encdec.generate(model, src, max_new_tokens=NEW_TOKENS)
    return {"seconds": time.perf_counter() - start}


def step_16k() -> dict:
    """In the child: one AdamW step of t5-small on 16,384 source tokens, blocks checkpointed as
    training.activation_checkpointing does."""
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

    import encdec
    from encdec.modules import DecoderBlock, EncoderBlock

    torch.manual_seed(0)
    model = encdec.build_model(encdec.preset("t5-small")).train()
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, (EncoderBlock, DecoderBlock)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    src = torch.randint(3, 32128, (1, 16384))
    tgt = torch.randint(3, 32128, (1, TARGET))
    start = time.perf_counter()
    loss = model(src, tgt, labels=tgt).loss
    loss.backward()
    optimizer.step()
    return {"seconds": time.perf_counter() - start, "loss": loss.item()}


OUT_OF_MEMORY = 3  # the child's exit status when its watch ends it


def watch_memory(limit_bytes: int) -> None:
    """End this process (status OUT_OF_MEMORY, its peak printed) once its resident set passes `limit_bytes`."""
    page = os.sysconf("SC_PAGE_SIZE")
    while True:
        with open("/proc/self/statm") as statm:
            resident = int(statm.read().split()[1]) * page
        if resident > limit_bytes:
            print(json.dumps({"out_of_memory": True, "peak_gib": resident / 2**30}), flush=True)
            os._exit(OUT_OF_MEMORY)
        time.sleep(0.02)


def child(args) -> None:
    threading.Thread(target=watch_memory, args=(int(args.limit_gib * 2**30),), daemon=True).start()
    import torch

    torch.set_num_threads(args.threads)
    try:
        if args.child == "step-16k":
            result = step_16k()
        else:
            result = measure(args.child, args.length, args.mode, args.attention)
    except (MemoryError, RuntimeError) as error:  # torch raises RuntimeError for a refused allocation
        if "memory" not in str(error).lower() and not isinstance(error, MemoryError):
            raise
        result = {"out_of_memory": True}
    result["peak_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(json.dumps(result))


def run_child(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True)
    if done.returncode not in (0, OUT_OF_MEMORY):
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cell(result: dict) -> str:
    if "error" in result:
        return f"failed: {result['error'][:60]}"
    if result.get("out_of_memory"):
        return f"out of memory (past {result['peak_gib']:.1f} GiB)"
    return f"{result['seconds']:.2f} s, {result['peak_gib']:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--impls", help=f"default: {','.join(IMPLS)}; with --local: {','.join(LOCAL_IMPLS)}")
    parser.add_argument("--modes", default="train,decode")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit-gib", type=float, default=14.0, help="each child's resident-memory bound")
    parser.add_argument("--step-16k", action="store_true", help="only the t5-small step at 16,384 tokens")
    parser.add_argument("--local", action="store_true", help=f"LongT5's local attention: {', '.join(LOCAL_IMPLS)}")
    parser.add_argument(
        "--attention",
        choices=("local", "transient_global"),
        default="local",
        help="with --local: LongT5's local or transient-global attention",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    common = ["--threads", str(args.threads), "--limit-gib", str(args.limit_gib), "--attention", args.attention]
    if args.step_16k:
        result = run_child(["--child", "step-16k", *common])
        print(f"t5-small, one AdamW step on 16,384 source + {TARGET} target tokens: {cell(result)}")
        return None
    known = LOCAL_IMPLS if args.local else IMPLS
    impls = (args.impls or ",".join(known)).split(",")
    if any(impl not in known for impl in impls):
        parser.error(f"--impls takes {', '.join(known)}{' (with --local)' if args.local else ''}, got {args.impls}")
    modes = args.modes.split(",")
    kind = args.attention.replace("_", "-")
    attention = f"LongT5's {kind} attention, radius {LOCAL_RADIUS}" if args.local else "T5's relative bias"
    from encdec.cpu_features import cpu_features

    print(
        f"T5 d_model {SHAPE['d_model']}, {SHAPE['n_heads']} heads, 2 + 2 layers, {attention}; batch 1; {args.threads} threads"
        f"; {cpu_features().describe()}"
    )
    print("| source tokens | mode | " + " | ".join(impls) + " |")
    print("| ---: | --- | " + " | ".join("---" for _ in impls) + " |")
    for length in map(int, args.lengths.split(",")):
        for mode in modes:
            cells = []
            for impl in impls:
                argv = ["--child", impl, "--length", str(length), "--mode", mode, *common]
                cells.append(cell(run_child(argv)))
            print(f"| {length:,} | {mode} | " + " | ".join(cells) + " |", flush=True)
    return None


if __name__ == "__main__":
    main()
