"""Training throughput: encdec's T5 against Hugging Face's T5ForConditionalGeneration.

Same config, same weights, same batches, side by side in one process, interleaved,
median of several timed steps (forward, backward, AdamW). Prints tokens/s (source
plus target tokens), the ratio, activation memory saved for backward and achieved GFLOP/s
against a matmul peak measured here.

    python benchmarks/bench_train.py [--steps 5] [--threads 2]
"""

import argparse
import statistics
import time

import torch

import encdec
from encdec.models import preset

D_MODEL, D_FF, LAYERS, HEADS, VOCAB = 256, 1024, 4, 4, 8192
BATCH, SRC, TGT = 16, 256, 64


def matmul_peak(seconds: float = 2.0) -> float:
    """Best GFLOP/s of a large fp32 matmul, the ceiling for this step."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        for _ in range(8):
            a @ b
        best = max(best, 8 * 2 * 1024**3 / (time.perf_counter() - start) / 1e9)
    return best


def step_flops() -> float:
    """Matmul FLOPs of one training step (forward + backward = 3x forward)."""
    d, f, h = D_MODEL, D_FF, D_MODEL // HEADS
    src_tokens, tgt_tokens = BATCH * SRC, BATCH * TGT
    encoder = LAYERS * src_tokens * (4 * d * d + 2 * d * f) * 2
    encoder += LAYERS * BATCH * HEADS * 2 * (2 * SRC * SRC * h)
    decoder = LAYERS * tgt_tokens * (4 * d * d + 2 * d * d + 2 * d * f) * 2  # self, cross q/o, ffn
    decoder += LAYERS * src_tokens * 2 * d * d * 2  # cross k/v over the encoder output
    decoder += LAYERS * BATCH * HEADS * 2 * (2 * TGT * TGT * h + 2 * TGT * SRC * h)
    head = tgt_tokens * d * VOCAB * 2
    return 3.0 * (encoder + decoder + head)


def build(dropout: float):
    from transformers import T5Config, T5ForConditionalGeneration

    hf_config = T5Config(vocab_size=VOCAB, d_model=D_MODEL, d_kv=D_MODEL // HEADS, d_ff=D_FF, num_layers=LAYERS,
                         num_heads=HEADS, dropout_rate=dropout, feed_forward_proj="relu", decoder_start_token_id=0)  # fmt: skip
    hf = T5ForConditionalGeneration(hf_config).train()
    ours = encdec.build_model(preset("t5-small", vocab_size=VOCAB, d_model=D_MODEL, n_heads=HEADS, d_ff=D_FF,
                                     n_encoder_layers=LAYERS, dropout=dropout))  # fmt: skip
    from encdec.interop.hf_t5 import hf_name

    hf_state = hf.state_dict()
    ours.load_state_dict({name: hf_state[hf_name(name)].clone() for name in ours.state_dict()})
    return ours.train(), hf


def batch(generator):
    src = torch.randint(2, VOCAB, (BATCH, SRC), generator=generator)
    mask = torch.ones(BATCH, SRC, dtype=torch.bool)
    labels = torch.randint(2, VOCAB, (BATCH, TGT), generator=generator)
    tgt = torch.cat([torch.zeros(BATCH, 1, dtype=torch.long), labels[:, :-1]], dim=1)
    return src, mask, tgt, labels


def run_ours(model, optimizer, b):
    src, mask, tgt, labels = b
    loss = model(src, tgt, src_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_hf(model, optimizer, b):
    src, mask, tgt, labels = b
    loss = model(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def saved_activation_mb(model, fn, b) -> float:
    """Megabytes of tensors autograd keeps for backward in one step (unique storages):
    the memory that grows with batch and length."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(model, torch.optim.SGD(model.parameters(), lr=0.0), b)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params) / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per implementation and setting")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    peak = matmul_peak()
    flops = step_flops()
    tokens = BATCH * (SRC + TGT)
    print(f"threads {args.threads}; matmul peak {peak:.0f} GFLOP/s; {flops / 1e9:.1f} GFLOP per step; "
          f"{tokens} tokens per step (batch {BATCH}, {SRC} source + {TGT} target)")  # fmt: skip
    print(f"{'dropout':>8} {'impl':>8} {'tokens/s':>10} {'GFLOP/s':>9} {'% peak':>7} {'ms/step':>8} {'activations MB':>15}")
    for dropout in (0.1, 0.0):
        ours, hf = build(dropout)
        runs = {"encdec": (ours, run_ours), "hf": (hf, run_hf)}
        optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, (m, _) in runs.items()}
        times = {name: [] for name in runs}
        memory = {name: saved_activation_mb(model, fn, batch(torch.Generator().manual_seed(2)))
                  for name, (model, fn) in runs.items()}  # fmt: skip
        g = torch.Generator().manual_seed(1)
        for i in range(args.steps + 1):  # the first round warms up
            b = batch(g)
            for name, (model, fn) in runs.items():
                start = time.perf_counter()
                fn(model, optimizers[name], b)
                if i:
                    times[name].append(time.perf_counter() - start)
        medians = {name: statistics.median(t) for name, t in times.items()}
        for name, seconds in medians.items():
            gflops = flops / seconds / 1e9
            print(f"{dropout:>8} {name:>8} {tokens / seconds:>10,.0f} {gflops:>9.1f} {100 * gflops / peak:>6.1f}% "
                  f"{1000 * seconds:>8.0f} {memory[name]:>15.0f}")  # fmt: skip
        print(f"{dropout:>8} {'ratio':>8} {medians['hf'] / medians['encdec']:>10.2f}x")
        del ours, hf, optimizers


if __name__ == "__main__":
    main()
