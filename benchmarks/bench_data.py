"""Data-layer benchmark: tokenization throughput, and UL2 batch assembly beside one training step.

Run: python benchmarks/bench_data.py [--preset t5-tiny] [--batch-size 16] [--length 512]

Prints tokens/s for Mistral's SentencePiece model and a byte-level BPE trained
on the TinyStories sample (in-process and through `prepare_shards` with two
workers), then the mean time to assemble one UL2 batch (B x 512-token chunks)
and of one training step (forward + backward + AdamW) of a small model on that
batch. Batch assembly must be a small fraction of the step.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from encdec.data.corpora import iter_tinystories
from encdec.data.documents import Documents
from encdec.data.objectives import UL2Config, UL2Objective
from encdec.data.shards import prepare_shards
from encdec.tokenizers import build_tokenizer

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
TINYSTORIES = SHARED / "tinystories" / "tinystories_train_head.txt.gz"
MISTRAL = SHARED / "tokenizers" / "mistral_tokenizer.model.v1"


def throughput(tokenizer, texts: list[str], repeats: int = 3) -> tuple[float, int]:
    """Best-of-`repeats` tokens per second of `tokenizer.encode` over `texts` in batches of 256."""
    best, count = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        count = sum(len(ids) for i in range(0, len(texts), 256) for ids in tokenizer.encode(texts[i : i + 256]))
        best = min(best, time.perf_counter() - start)
    return count / best, count


def timed(function, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", help="model preset(s) for the training step (default t5-tiny)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    presets = args.preset or ["t5-tiny"]
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    stories = list(iter_tinystories(TINYSTORIES))
    mistral = build_tokenizer("sentencepiece", MISTRAL)
    start = time.perf_counter()
    bpe = build_tokenizer("bpe", texts=stories, vocab_size=8000)
    print(f"trained byte-level BPE (8,000 ids) on {len(stories):,} stories in {time.perf_counter() - start:.1f} s")
    for name, tokenizer in (("mistral sentencepiece", mistral), ("trained bpe 8k", bpe)):
        rate, count = throughput(tokenizer, stories)
        print(f"tokenize  {name:<22} {rate:>12,.0f} tokens/s  ({count:,} tokens, one process)")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        prepare_shards(Path(tmp) / "shards", mistral, "tinystories", [TINYSTORIES], workers=2, progress=False)
        elapsed = time.perf_counter() - start
        prepared = int(np.load(Path(tmp) / "shards" / "train.text.idx.npy")[-1])
        print(
            f"prepare   {'mistral, 2 workers':<22} {prepared / elapsed:>12,.0f} tokens/s  "
            f"({prepared:,} tokens in {elapsed:.2f} s incl. worker start-up and checksums)"
        )

    stream = np.concatenate(mistral.encode(stories, add_eos=True)).astype(np.uint16)
    length = args.length
    documents = Documents(
        stream[: len(stream) // length * length], np.arange(0, len(stream) // length * length + 1, length)
    )
    objective = UL2Objective(
        documents,
        args.batch_size,
        mistral.pad_id,
        mistral.eos_id,
        mistral.decoder_start_id,
        mistral.sentinel_ids,
        UL2Config(max_length=length),
        seed=0,
    )
    objective.next_batch()
    assembly = timed(objective.next_batch, 200)
    batch = objective.next_batch()
    assemble_ms = 1000 * statistics.mean(assembly)
    print(
        f"UL2 batch {args.batch_size} x {length}-token chunks: "
        f"src {tuple(batch.src_ids.shape)}, tgt {tuple(batch.tgt_ids.shape)}; "
        f"assembly {assemble_ms:.2f} ms (median {1000 * statistics.median(assembly):.2f} ms over 200)"
    )

    from encdec.models import build_model, count_parameters, preset

    for name in presets:
        cfg = preset(
            name,
            vocab_size=mistral.vocab_size,
            pad_id=mistral.pad_id,
            eos_id=mistral.eos_id,
            decoder_start_id=mistral.decoder_start_id,
        )
        model = build_model(cfg)
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)

        def step():
            optimizer.zero_grad(set_to_none=True)
            out = model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, labels=batch.labels)
            out.loss.backward()
            optimizer.step()

        step()  # warm-up
        step_ms = 1000 * statistics.mean(timed(step, args.steps))
        print(
            f"train step {name} ({count_parameters(model) / 1e6:.1f}M params): {step_ms:.0f} ms; "
            f"batch assembly = {100 * assemble_ms / step_ms:.2f}% of a step ({step_ms / assemble_ms:.0f}x cheaper)"
        )


if __name__ == "__main__":
    main()
