"""Where a training step's time goes: torch.profiler over bench_train's step, encdec beside Hugging Face.

The same models, batches and step as bench_train.py (forward, backward, AdamW); after warm-up, a few steps
under the profiler, and per implementation the operators that took the most device time (CUDA kernels on a
GPU, CPU time on CPU), with each one's share of the step. The table to read before changing the step.

    python benchmarks/profile_train_step.py --device cuda --dtype bf16 --shape t5-base --batch 32
    python benchmarks/profile_train_step.py            # CPU: cpu-small, fp32, a smaller batch
"""

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import build, model_config, random_batch, shape_named, synchronize, train_step  # noqa: E402


def profile_steps(name: str, model, optimizer, batches, autocast, device, rows: int) -> str:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        for batch in batches:
            train_step(name, model, optimizer, batch, autocast)
        synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=70)


def main(argv=None) -> None:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if cuda else "cpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), help="default bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--shape", default=None, help="cpu-small or a T5 preset; default t5-base on CUDA")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--src-len", type=int)
    parser.add_argument("--tgt-len", type=int)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per implementation")
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not cuda:
        parser.error("--device cuda but torch sees no CUDA GPU")
    device = torch.device(args.device)
    dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    shape = shape_named(args.shape or ("t5-base" if device.type == "cuda" else "cpu-small"))
    dims = (args.batch or shape.batch, args.src_len or shape.src_len, args.tgt_len or shape.tgt_len)
    cfg = model_config(shape, args.dropout)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else nullcontext()
    torch.manual_seed(0)
    models = build(cfg, device)
    fused = {"fused": True} if device.type == "cuda" else {}
    g = torch.Generator().manual_seed(1)
    batches = [random_batch(cfg, *dims, g, device) for _ in range(args.steps)]
    print(f"{args.device} {dtype} {args.shape or shape.preset} B,S,T={dims} {'compiled' if args.compile else 'eager'}")
    for name, model in models.items():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
        step_model = torch.compile(model) if args.compile else model
        for _ in range(args.warmup):
            train_step(name, step_model, optimizer, batches[0], autocast)
        print(f"\n== {name}")
        print(profile_steps(name, step_model, optimizer, batches, autocast, device, args.rows))


if __name__ == "__main__":
    main()
