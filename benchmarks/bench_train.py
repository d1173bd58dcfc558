"""Training throughput: encdec's T5 beside Hugging Face's T5ForConditionalGeneration, and our trainer.

Same config, same weights, same batches, side by side in one process, interleaved;
the median of the timed steps after warm-up (forward, backward, AdamW, fused on CUDA).
Per implementation: tokens/s (source plus target tokens, and target tokens with
loss), ms/step, model FLOP utilisation (MFU) against the device's peak, and memory
(on CUDA the step's peak allocation, on CPU the activations kept for backward).
Then encdec's own trainer (`encdec.training.trainer.train`) on the TinyStories
sample at the same shape, and its throughput as a share of the bare step.

    python benchmarks/bench_train.py                    # CPU: the cpu-small shape, fp32
    python benchmarks/bench_train.py --device cuda --dtype bf16 --shapes t5-small,t5-base --batch 32

Shapes: B batch, S source length, T target length.
"""

import argparse
import gc
import statistics
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

import encdec
from encdec.interop.t5.t5_layout import NAMES, OUR_ACTIVATIONS, check_t5_compatible
from encdec.models import ModelConfig, preset
from encdec.models.presets import preset_names
from encdec.modules.feed_forward import GATED
from encdec.training.flops import datasheet_tflops, step_flops

REPO = Path(__file__).resolve().parents[1]
DATA_DIRS = [REPO / "shared" / "data", REPO.parent / "shared" / "data"]  # in the checkout, or beside it
TINYSTORIES = "tinystories/tinystories_train_head.txt.gz"
MISTRAL = "tokenizers/mistral_tokenizer.model.v1"


@dataclass(frozen=True)
class Shape:
    preset: str
    overrides: dict = field(default_factory=dict)  # ModelConfig fields on top of the preset
    batch: int = 32
    src_len: int = 512
    tgt_len: int = 128


# the CPU table of docs/benchmarks.md; any T5 preset name (t5-small, t5-base, t5-v1.1-base, ...) is a shape too
SHAPES = {
    "cpu-small": Shape(
        "t5-small",
        dict(vocab_size=8192, d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=4),
        batch=16,
        src_len=256,
        tgt_len=64,
    ),
}


def shape_named(name: str) -> Shape:
    if name in SHAPES:
        return SHAPES[name]
    if name in preset_names() and name.startswith("t5-"):
        return Shape(name)
    known = [*SHAPES, *(n for n in preset_names() if n.startswith("t5-"))]
    raise SystemExit(f"unknown shape {name!r}; shapes: {', '.join(known)}")


def model_config(shape: Shape, dropout: float, attention: str = "auto") -> ModelConfig:
    """The shape's config at `dropout`, its attention computed as `attention` says (model.attention.implementation:
    auto, dense or flex)."""
    cfg = preset(shape.preset, **shape.overrides, dropout=dropout, attention={"implementation": attention})
    check_t5_compatible(cfg)
    return cfg


def matmul_tflops(device: torch.device, dtype: torch.dtype, seconds: float = 2.0) -> float:
    """Best TFLOP/s of a large square matmul in `dtype`: the ceiling where no data sheet says."""
    n = 8192 if device.type == "cuda" else 1024
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(8):
            a @ b
        synchronize(device)
        best = max(best, 8 * 2 * n**3 / (time.perf_counter() - start) / 1e12)
    return best


@dataclass
class Peak:
    """The device's peak TFLOP/s for MFU: given, from the data sheet, or measured. A measured peak is
    measured again after each set of timed steps and the best kept: a busy or cold machine reads low."""

    tflops: float
    source: str
    dtype: torch.dtype | None = None  # set when measured

    def remeasure(self, device: torch.device) -> None:
        if self.dtype is not None:
            self.tflops = max(self.tflops, matmul_tflops(device, self.dtype))


def device_peak(device: torch.device, precision: str, given: float | None) -> Peak:
    """The peak for `precision` bf16, tf32 or fp32."""
    if given:
        return Peak(given, "given")
    sheet = datasheet_tflops(device, precision)
    if sheet is not None:
        return Peak(sheet, f"{torch.cuda.get_device_name(device)}, data sheet")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return Peak(matmul_tflops(device, dtype), "measured matmul, best over the run", dtype)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hf_model(cfg: ModelConfig, attn_implementation: str | None = None):
    """transformers' T5 of the encdec config `cfg`, with random weights (`attn_implementation`: theirs by default)."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=cfg.vocab_size,
        d_model=cfg.d_model,
        d_kv=cfg.head_dim,
        d_ff=cfg.d_ff,
        num_layers=cfg.n_encoder_layers,
        num_decoder_layers=cfg.decoder_layers,
        num_heads=cfg.n_heads,
        relative_attention_num_buckets=cfg.positions.relative_buckets,
        relative_attention_max_distance=cfg.positions.relative_max_distance,
        dropout_rate=cfg.dropout,
        layer_norm_epsilon=cfg.norms.eps,
        feed_forward_proj=OUR_ACTIVATIONS[cfg.activation],
        tie_word_embeddings=cfg.output.scale,
        pad_token_id=cfg.pad_id,
        eos_token_id=cfg.eos_id,
        decoder_start_token_id=cfg.decoder_start_id,
    )
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    return T5ForConditionalGeneration(config)


def build(cfg: ModelConfig, device: torch.device) -> dict:
    """{"encdec": model, "hf": model}: Hugging Face's weights copied into ours, both training, on `device`."""
    hf = hf_model(cfg)
    ours = encdec.build_model(cfg)
    hf_state = hf.state_dict()
    ours.load_state_dict({name: hf_state[NAMES.hf(name)].clone() for name in ours.state_dict()})
    return {"encdec": ours.to(device).train(), "hf": hf.to(device).train()}


def random_batch(cfg: ModelConfig, b: int, s: int, t: int, generator, device) -> tuple:
    src = torch.randint(2, cfg.vocab_size, (b, s), generator=generator)  # (B, S)
    mask = torch.ones(b, s, dtype=torch.bool)
    labels = torch.randint(2, cfg.vocab_size, (b, t), generator=generator)  # (B, T)
    tgt = torch.cat([torch.full((b, 1), cfg.decoder_start_id), labels[:, :-1]], dim=1)
    return tuple(x.to(device) for x in (src, mask, tgt, labels))


def forward_loss(impl: str, model, batch):
    src, mask, tgt, labels = batch
    if impl == "encdec":
        return model(src, tgt, src_mask=mask, labels=labels).loss
    return model(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt, labels=labels).loss


def train_step(impl: str, model, optimizer, batch, autocast) -> None:
    with autocast:
        loss = forward_loss(impl, model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def saved_activation_mib(impl: str, model, batch, autocast) -> float:
    """MiB of tensors autograd keeps for backward in one step (unique storages, parameters excluded):
    the memory that grows with batch and length."""
    storages = {}

    def pack(tensor):
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        train_step(impl, model, torch.optim.SGD(model.parameters(), lr=0.0), batch, autocast)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params) / 2**20


def cuda_peak_mib(impl: str, model, optimizer, batch, autocast, device) -> float:
    """MiB one implementation's step peaks at on its own: the allocation it adds during the step (activations,
    gradients, workspaces) on top of its resident weights and optimizer state; the other model is left out."""
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    train_step(impl, model, optimizer, batch, autocast)
    synchronize(device)
    added = torch.cuda.max_memory_allocated(device) - before
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    resident = sum(t.nbytes for t in [*model.parameters(), *state])
    return (added + resident) / 2**20


@dataclass
class BareResult:
    seconds: dict  # impl -> median seconds per step
    memory_mib: dict  # impl -> MiB


def time_bare_steps(cfg: ModelConfig, dims: tuple[int, int, int], args, autocast) -> BareResult:
    """Both implementations on the same batches of `dims` (B, S, T), interleaved step by step; medians
    of the timed steps, each timed whole (the device synchronized before and after)."""
    device = args.device
    models = build(cfg, device)
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, **fused) for name, m in models.items()}
    memory = {}
    if device.type == "cpu":  # measured eagerly: the hooks do not see inside compiled graphs
        b = random_batch(cfg, *dims, torch.Generator().manual_seed(2), device)
        memory = {name: saved_activation_mib(name, m, b, autocast) for name, m in models.items()}
    steps = {name: torch.compile(m) if args.compile else m for name, m in models.items()}
    times = {name: [] for name in models}
    g = torch.Generator().manual_seed(1)
    for i in range(args.warmup + args.steps):
        b = random_batch(cfg, *dims, g, device)
        for name, model in steps.items():
            synchronize(device)
            start = time.perf_counter()
            train_step(name, model, optimizers[name], b, autocast)
            synchronize(device)
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)
    if device.type == "cuda":
        memory = {name: cuda_peak_mib(name, m, optimizers[name], b, autocast, device) for name, m in steps.items()}
    del models, steps, optimizers
    release(device)
    return BareResult({name: statistics.median(t) for name, t in times.items()}, memory)


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def span_layout(src_len: int, tgt_len: int) -> tuple[int, float, float]:
    """(chunk length, noise density, mean span) for which T5 span corruption yields exactly `src_len`
    input tokens and `tgt_len` target tokens (EOS included), so the trainer's batches have the bare
    step's shape. Mean span about 3 as T5's; 512 + 128 needs density 0.165 where T5's 0.15 gives 511 + 114."""
    if tgt_len < 3:
        raise SystemExit("--tgt-len must be at least 3 for span corruption")
    spans = max(1, round((tgt_len - 1) / 4))  # the target: a sentinel before each span, then EOS
    noise = tgt_len - 1 - spans
    length = src_len + noise - spans  # the input keeps one sentinel per span
    return length, noise / length, noise / spans


def write_text(stories: list[str], chars: int, path: Path) -> None:
    """The stories one after another (repeated when `chars` asks for more) as one document: no blank lines."""
    parts, total, i = [], 0, 0
    while total < chars:
        story = "\n".join(line for line in stories[i % len(stories)].splitlines() if line.strip())
        parts.append(story)
        total, i = total + len(story) + 1, i + 1
    path.write_text("\n".join(parts) + "\n")


def trainer_tokens_per_s(records: list[dict], warmup: int) -> tuple[float, str]:
    """Target tokens with loss per second over the train records after `warmup` steps, and how it was read.

    With cumulative "tokens" and "elapsed" in the records: their growth after warm-up. Without
    (older trainers): the harmonic mean of each step's "tokens_per_s", which is the same figure
    when every step trains the same number of tokens, as the fixed-shape batches here do.
    """
    train = [r for r in records if r.get("kind") == "train"]
    timed = [r for r in train if r["step"] > warmup]
    if not timed:
        raise SystemExit("the trainer logged no step after warm-up")
    if all("tokens" in r and "elapsed" in r for r in train):
        base = next((r for r in train if r["step"] == warmup), {"tokens": 0, "elapsed": 0.0})
        last = timed[-1]
        return (last["tokens"] - base["tokens"]) / (last["elapsed"] - base["elapsed"]), "tokens / elapsed"
    return len(timed) / sum(1 / r["tokens_per_s"] for r in timed), "per-step tokens_per_s"


def run_trainer(cfg: ModelConfig, shape: Shape, dims: tuple[int, int, int], args) -> tuple[float, str, str]:
    """Train encdec with `encdec.training.trainer.train` for warm-up + timed steps at `cfg` and `dims`
    on the TinyStories sample, in a temporary run directory; (target tokens/s, how read, tokenizer).

    The sample's stories go into one document (repeated as the run needs), so that every span
    corruption example is exactly S + T tokens. The tokenizer is Mistral's SentencePiece model when
    the model's vocabulary holds it, else bytes (cpu-small's 8,192 ids). The trainer reads its losses
    every warm-up-many steps (output.log_interval), so the record closing the warm-up carries its own
    time rather than one spread over a longer interval."""
    from encdec.data.corpora import iter_tinystories
    from encdec.schema import read
    from encdec.tokenizers import build_tokenizer
    from encdec.training.metrics import read_metrics
    from encdec.training.run_config import RunConfig
    from encdec.training.trainer import train

    batch, src_len, tgt_len = dims
    length, density, mean_span = span_layout(src_len, tgt_len)
    sentinels = max(100, round((tgt_len - 1) / 4))  # one per span
    spm = args.data_dir / MISTRAL
    if build_tokenizer("sentencepiece", spm, num_sentinels=sentinels).vocab_size <= cfg.vocab_size:
        tokenizer, chars_per_token = {"kind": "sentencepiece", "path": str(spm)}, 5.0
    else:
        tokenizer, chars_per_token = {"kind": "byte"}, 1.1
    stories = list(iter_tinystories(args.data_dir / TINYSTORIES))
    batch_chars = int(1.5 * chars_per_token * batch * length)  # enough for one batch of full chunks, and more
    steps = args.warmup + args.steps
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        tmp = Path(tmp)
        write_text(stories[:-100], (steps + 2) * batch_chars, tmp / "train.txt")  # one epoch covers the run
        write_text(stories[-100:], batch_chars, tmp / "valid.txt")
        values = {
            "model": {
                "preset": shape.preset,
                **shape.overrides,
                "vocab_size": cfg.vocab_size,
                "dropout": cfg.dropout,
                "attention": {"implementation": cfg.attention.implementation},
            },
            "tokenizer": {**tokenizer, "num_sentinels": sentinels},
            "data": {"format": "text", "train": [str(tmp / "train.txt")], "validation": [str(tmp / "valid.txt")]},
            "objective": {
                "kind": "span_corruption",
                "seq_len": length,
                "noise_density": density,
                "mean_span": mean_span,
            },
            "optimizer": {"lr": 1e-4},
            "schedule": {"kind": "constant"},
            "training": {
                "steps": steps,
                "batch_size": batch,
                "precision": args.dtype,
                "device": args.device.type,
                "compile": args.compile,
                "threads": args.threads,
                "seed": 0,
            },
            "evaluation": {"interval": steps, "steps": 1},
            "output": {"log_interval": max(args.warmup, 1), "keep_last": 1, "plot": False},
        }
        train(read(RunConfig, values), tmp / "run")
        records = read_metrics(tmp / "run" / "metrics.jsonl")
    release(args.device)
    tokens_per_s, how = trainer_tokens_per_s(records, args.warmup)
    return tokens_per_s, how, tokenizer["kind"]


def fmt_flops(tflops: float) -> str:
    return f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3f}"


def report_shape(name: str, cfg: ModelConfig, shape: Shape, dims: tuple[int, int, int], args, peak: Peak, autocast):
    batch, src_len, tgt_len = dims
    flops = step_flops(cfg, *dims)
    gated = " gated" if cfg.activation in GATED else ""
    print(
        f"\n{name}: d_model {cfg.d_model}, d_ff {cfg.d_ff}{gated}, {cfg.n_heads} heads x {cfg.head_dim}, "
        f"{cfg.n_encoder_layers} + {cfg.decoder_layers} layers, vocabulary {cfg.vocab_size:,}; batch {batch} x "
        f"({src_len} source + {tgt_len} target) tokens; {flops / 1e12:.3g} TFLOP per step"
    )
    memory = "peak MiB" if args.device.type == "cuda" else "saved MiB"
    print(
        f"{'dropout':>7} {'impl':>9} {'tokens/s':>10} {'tgt tok/s':>10} {'ms/step':>9} {'TFLOP/s':>8} {'MFU':>6} "
        f"{memory:>10}"
    )
    results = {p: time_bare_steps(model_config(shape, p, args.attention), dims, args, autocast) for p in args.dropout}
    peak.remeasure(args.device)  # after the steps, so that every row of the table divides by the same peak
    for dropout, result in results.items():
        for impl, seconds in result.seconds.items():
            tflops = flops / seconds / 1e12
            print(
                f"{dropout:>7} {impl:>9} {batch * (src_len + tgt_len) / seconds:>10,.0f} "
                f"{batch * tgt_len / seconds:>10,.0f} {1000 * seconds:>9.1f} {fmt_flops(tflops):>8} "
                f"{100 * tflops / peak.tflops:>5.1f}% {result.memory_mib[impl]:>10,.0f}"
            )
        s, m = result.seconds, result.memory_mib
        print(f"{dropout:>7} {'encdec/HF':>9} speed {s['hf'] / s['encdec']:.2f}x, memory {m['encdec'] / m['hf']:.2f}x")
    print(f"MFU against {fmt_flops(peak.tflops)} TFLOP/s ({peak.source})")
    if not args.trainer:
        return
    dropout = args.dropout[0]
    trainer, how, tokenizer = run_trainer(model_config(shape, dropout, args.attention), shape, dims, args)
    bare = batch * tgt_len / results[dropout].seconds["encdec"]  # the same unit: target tokens with loss per second
    print(f"trainer end-to-end: {trainer:,.0f} tok/s = {100 * trainer / bare:.0f}% of the bare step")
    print(
        f"  unit: target tokens with loss per second ({trainer * (src_len + tgt_len) / tgt_len:,.0f} source + "
        f"target tokens/s); bare encdec step {bare:,.0f}; dropout {dropout}; span corruption on the "
        f"TinyStories sample, {tokenizer} tokenizer; read from {how}"
    )


def parse_args(argv=None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if cuda else "cpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), help="bf16: autocast, fp32 weights; default bf16 on CUDA")
    parser.add_argument(
        "--shapes", help="comma-separated: cpu-small or T5 presets; default t5-small,t5-base on CUDA, cpu-small on CPU"
    )
    parser.add_argument("--batch", type=int, help="default 32; cpu-small 16")
    parser.add_argument("--src-len", type=int, help="default 512; cpu-small 256")
    parser.add_argument("--tgt-len", type=int, help="default 128; cpu-small 64")
    parser.add_argument("--steps", type=int, help="timed steps per implementation; default 10 on CUDA, 5 on CPU")
    parser.add_argument("--warmup", type=int, help="untimed steps first; default 3 on CUDA, 1 on CPU")
    parser.add_argument("--dropout", default="0.1", help="comma-separated, e.g. 0.1,0; the trainer runs the first")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (and the trainer's)")
    parser.add_argument(
        "--attention",
        choices=("auto", "dense", "flex"),
        default="auto",
        help="encdec's attention (model.attention.implementation): auto takes FlexAttention on CUDA where masked",
    )
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True, help="fp32 on CUDA: TF32")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak for MFU; default: data sheet or measured")
    parser.add_argument(
        "--trainer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time encdec's trainer end to end on the TinyStories sample",
    )
    parser.add_argument("--data-dir", type=Path, default=next((d for d in DATA_DIRS if d.is_dir()), DATA_DIRS[0]))
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="CPU threads")
    args = parser.parse_args(argv)
    on_cuda = args.device == "cuda"
    if on_cuda and not cuda:
        parser.error("--device cuda but torch sees no CUDA GPU")
    args.device = torch.device(args.device)
    args.dtype = args.dtype or ("bf16" if on_cuda else "fp32")
    args.shapes = (args.shapes or ("t5-small,t5-base" if on_cuda else "cpu-small")).split(",")
    args.steps = args.steps or (10 if on_cuda else 5)
    args.warmup = args.warmup if args.warmup is not None else (3 if on_cuda else 1)
    args.dropout = [float(p) for p in args.dropout.split(",")]
    if args.trainer and not (args.data_dir / TINYSTORIES).is_file():
        parser.error(f"no TinyStories sample under --data-dir {args.data_dir}; pass --data-dir or --no-trainer")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = args.device
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    precision = "bf16" if args.dtype == "bf16" else ("tf32" if device.type == "cuda" and args.tf32 else "fp32")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if args.dtype == "bf16" else nullcontext()
    peak = device_peak(device, precision, args.peak_tflops)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} threads"
    labels = {"bf16": "bf16 autocast, fp32 weights", "tf32": "fp32 weights, TF32 matmuls", "fp32": "fp32"}
    print(
        f"{where}; {labels[precision]}; AdamW"
        f"{' fused' if device.type == 'cuda' else ''}; {'compiled' if args.compile else 'eager'}; "
        f"median of {args.steps} steps after {args.warmup} warm-up"
    )
    for name in args.shapes:
        shape = shape_named(name)
        dims = (args.batch or shape.batch, args.src_len or shape.src_len, args.tgt_len or shape.tgt_len)
        report_shape(name, model_config(shape, args.dropout[0], args.attention), shape, dims, args, peak, autocast)


if __name__ == "__main__":
    main()
