"""objective.pack on a run config: the same steps unpacked and packed, side by side, interleaved.

For each of the first N training steps of the config's objective: its rows, the share of
source and target positions holding a real token (`fill`), the loss (the same examples:
equal in both without dropout) and the time of one forward and backward of the config's
model. The median step time of each layout, and their ratio, close the table.

    python benchmarks/bench_packing.py configs/main.yaml --steps 12

Shapes: B rows, S source length, T target length.
"""

import argparse
import copy
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from encdec.models import build_model
from encdec.training.loader import fill
from encdec.training.run_config import load_config
from encdec.training.run_data import build_run_data


def timed_step(model, batch) -> tuple[float, float]:
    """(seconds, CE loss) of one forward and backward."""
    start = time.perf_counter()
    out = model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, labels=batch.labels, **batch.packing)
    out.loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start, out.ce_loss.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    cfg = replace(cfg, objective=replace(cfg.objective, pack=False))
    with tempfile.TemporaryDirectory() as tmp:
        data = build_run_data(cfg, Path(tmp))
    packed = copy.copy(data.train)  # the same plan and examples, laid out packed
    packed.pack = True
    tok = data.tokenizer
    torch.manual_seed(0)
    model = build_model(cfg.model.build(tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id))
    times: dict[bool, list[float]] = {False: [], True: []}
    print("step  layout    B x (S + T)      fill   loss      s")
    for step in range(args.steps):
        for pack in (False, True) if step % 2 == 0 else (True, False):  # alternate who goes first
            batch = (packed if pack else data.train).batch_at(0, step)
            seconds, loss = timed_step(model, batch)
            times[pack].append(seconds)
            real, positions = fill(batch)
            shape = f"{batch.batch_size} x ({batch.src_ids.shape[1]} + {batch.tgt_ids.shape[1]})"
            print(
                f"{step:4d}  {'packed' if pack else 'padded':8s}  {shape:15s}  {real / positions:.3f}  "
                f"{loss:.5f}  {seconds:.3f}"
            )
    medians = {pack: statistics.median(t) for pack, t in times.items()}
    print(
        f"median s/step: padded {medians[False]:.3f}, packed {medians[True]:.3f}, "
        f"packed {medians[False] / medians[True]:.2f}x as fast"
    )


if __name__ == "__main__":
    main()
