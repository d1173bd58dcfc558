"""The per-step records of a training run: losses kept on the device and read in one transfer per
log interval, then written to metrics.jsonl (and TensorBoard) with the interval's rates."""

import datetime
import math
import sys
import time

import torch
from tqdm import tqdm

from encdec.runs.state import TrainState
from encdec.training.metrics import MetricsLog


class StepLog:
    """Per-step losses kept on the device and read in one transfer per log interval, then written.

    Every step still gets its own record; `tokens_per_s` is its interval's training rate of target
    tokens (with loss) and `source_tokens_per_s` of source tokens (real ones; rows with a source alone)
    (evaluation and checkpointing excluded), and `elapsed` the run's wall time at that step,
    spread evenly over the interval's steps; aux values are device tensors (read in the one
    transfer) or host numbers (written as they are); `grad_norm` is the gradient's norm before
    clipping, on a GPU `peak_memory_mib` the interval's peak allocation, and `mfu` the
    interval's model FLOP utilisation where the step's FLOPs and the device's peak are
    known (training/flops.py).
    """

    def __init__(
        self,
        metrics: MetricsLog,
        bar: tqdm,
        state: TrainState,
        device: torch.device,
        peak_tflops: float | None = None,
        print_progress_of: int | None = None,
        max_time: float | None = None,
    ):
        """`print_progress_of`: the run's steps, where a progress line is printed to stderr at each flush, in the
        bar's place (stderr is no terminal, so the bar is off: `2> log`); None: the bar alone. `max_time`: the
        run's training.max_time, which the line's time left counts to where it ends the run first."""
        self.metrics, self.bar, self.state, self.device = metrics, bar, state, device
        self.total_steps = print_progress_of
        self.max_time = max_time
        self.sources = 0  # the pending steps' source tokens
        self.peak_flops = peak_tflops * 1e12 if peak_tflops else None
        self.pending: list[tuple[int, torch.Tensor, int, dict, float]] = []
        self.flops: float | None = 0.0  # the pending steps' matmul FLOPs; None once a step's are unknown
        self.started = time.perf_counter() - state.elapsed  # wall clock of step 0, over resumes
        self.interval_started = time.perf_counter()
        self.flushed_elapsed = state.elapsed

    def add(
        self,
        step: int,
        ce_sum: torch.Tensor,
        n_tokens: int,
        aux: dict,
        lr: float,
        flops: float | None = None,
        source_tokens: int = 0,
    ) -> None:
        self.pending.append((step, ce_sum, n_tokens, aux, lr))
        self.sources += source_tokens
        self.flops = None if flops is None or self.flops is None else self.flops + flops

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def peak_memory_mib(self) -> float | None:
        """The device's peak allocation since the last read (CUDA only; a host-side counter, no sync)."""
        if self.device.type != "cuda":
            return None
        peak = torch.cuda.max_memory_allocated(self.device) / 2**20
        torch.cuda.reset_peak_memory_stats(self.device)
        return round(peak, 1)

    def restart_interval(self) -> None:
        self.interval_started = time.perf_counter()

    def flush(self) -> int | None:
        """Write the pending steps' records; returns the first step whose loss is not finite, else None."""
        if not self.pending:
            return None
        first_aux = self.pending[0][3]
        names = sorted(n for n in first_aux if isinstance(first_aux[n], torch.Tensor))  # on the device
        rows = [
            torch.stack([ce_sum.float(), *(aux[n].float() for n in names)]) for _, ce_sum, _, aux, _ in self.pending
        ]
        values = torch.stack(rows).tolist()  # (steps, 1 + aux): the one wait for the device
        peak_mib = self.peak_memory_mib()
        now, elapsed = time.perf_counter(), self.elapsed()
        tokens = sum(n for _, _, n, _, _ in self.pending)
        seconds = max(now - self.interval_started, 1e-9)
        tokens_per_s = tokens / seconds
        source_per_s = self.sources / seconds if self.sources else None
        mfu = self.flops / seconds / self.peak_flops if self.flops and self.peak_flops else None
        first_tokens = self.state.tokens - tokens
        for i, ((step, _, n_tokens, aux, lr), row) in enumerate(zip(self.pending, values, strict=True)):
            first_tokens += n_tokens
            at = self.flushed_elapsed + (elapsed - self.flushed_elapsed) * (i + 1) / len(self.pending)
            record = {
                "kind": "train",
                "step": step,
                "loss": row[0] / max(n_tokens, 1),
                "lr": lr,
                "tokens_per_s": tokens_per_s,
                "tokens": first_tokens,
                "elapsed": at,
            }
            if source_per_s is not None:
                record["source_tokens_per_s"] = source_per_s
            if peak_mib is not None:
                record["peak_memory_mib"] = peak_mib
            if mfu is not None:
                record["mfu"] = mfu
            host = {n: v for n, v in aux.items() if n not in names}  # host numbers (fill) as they are
            self.metrics.write({**record, **dict(zip(names, row[1:], strict=True)), **host})
        self.bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}", tok_s=f"{tokens_per_s:,.0f}")
        if self.total_steps is not None:
            line = progress_line(record, seconds / len(self.pending), self.total_steps, self.max_time)
            print(line, file=sys.stderr, flush=True)
        diverged = next((step for (step, *_), row in zip(self.pending, values) if not math.isfinite(row[0])), None)
        self.pending.clear()
        self.flops, self.sources = 0.0, 0
        self.flushed_elapsed = elapsed
        self.interval_started = now
        return diverged


def progress_line(record: dict, seconds_per_step: float, total_steps: int, max_time: float | None = None) -> str:
    """A step's figures as the Hugging Face Trainer prints its logs off a terminal, a Python dict a line:
    {'step': 120, 'loss': 4.1234, 'learning_rate': 0.0012, 'seconds_per_step': 0.52, ...}. Time left is the
    earlier end: the steps left at this pace, or what training.max_time leaves of the run's time (over resumes).
    Target tokens (with loss) and source tokens a second are each named; a run without sources has no source rate."""
    left = max(total_steps - record["step"], 0) * seconds_per_step
    if max_time is not None:
        left = min(left, max(max_time - record["elapsed"], 0.0))
    figures = {
        "step": record["step"],
        "loss": round(record["loss"], 4),
        "learning_rate": float(f"{record['lr']:.3g}"),
        "seconds_per_step": round(seconds_per_step, 3),
        "target_tokens_per_second": round(record["tokens_per_s"]),
    }
    if "source_tokens_per_s" in record:
        figures["source_tokens_per_second"] = round(record["source_tokens_per_s"])
    figures["time_left"] = str(datetime.timedelta(seconds=round(left)))
    return str(figures)
