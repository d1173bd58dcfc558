"""The training loop, read top to bottom: `train(cfg, run_dir)` = `set_up`, then `run_loop`.

    set_up:         build tokenizer, data, model, optimizer (or restore them from the latest
                    checkpoint) into one `Training`
    run_loop, for each step:  lr from the schedule; grad-accumulated micro-batches; clip; AdamW
                    every `output.log_interval` steps read the losses and log them (and, where
                    stderr is no terminal, print a progress line in the bar's place);
                    every `evaluation.interval` steps (or `interval_time` seconds) evaluate and
                    checkpoint; past `training.max_time` seconds evaluate, checkpoint and stop
    at the end:     the curves as a PNG

The device never waits on the host inside a step: batches are built ahead by
`training.loader` (pinned, copied without blocking), token counts are host
integers, and losses stay on the device until the log interval reads them in
one transfer. A run is deterministic on CPU for a given seed (on a GPU with
`training.deterministic`), and `resume=True` continues from the latest
checkpoint so exactly that the logged losses equal those of an uninterrupted
run. SIGINT and SIGTERM finish the current step, save, and return.
"""

import json
import logging
import math
import signal
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType

import torch
from torch import nn
from tqdm import tqdm

from encdec.errors import TrainingError
from encdec.models.lora import trainable_state
from encdec.runs.checkpoint import save_checkpoint
from encdec.runs.description import description_files
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import write_atomic
from encdec.training import distributed
from encdec.training.flops import training_peak_tflops
from encdec.training.loader import batch_stream, bucket_padding
from encdec.training.memory import is_out_of_memory, step_out_of_memory
from encdec.training.metrics import plot_curves, read_metrics
from encdec.training.numerics import autocast, numerics, rng_states
from encdec.training.optim import lr_at
from encdec.training.optimizer_step import batches_flops, optimizer_step
from encdec.training.run_config import RunConfig, save_config
from encdec.training.run_lock import hold_run_dir
from encdec.training.samples import GeneratedScores
from encdec.training.setup import Training, set_up
from encdec.training.step_log import StepLog
from encdec.training.validation import best_by_score, compare_to_best, evaluate

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    train_loss: float | None
    val_loss: float | None
    parameters: int
    parameters_without_positions: int
    wall_time: float
    tokens_per_s: float
    interrupted: bool = False
    early_stopped: bool = False
    out_of_time: bool = False  # stopped by training.max_time (after its evaluation and checkpoint)
    eval_step: int | None = None  # the step of the evaluation train_loss and val_loss come from
    signal: int | None = None  # the signal that stopped the run, if one did
    is_main: bool = True  # False on the other processes under torchrun
    history: list = field(default_factory=list)


class StopRequest:
    """Turns SIGINT / SIGTERM into a flag the loop checks after each step."""

    def __init__(self):
        self.requested = False  # a signal reached this process
        self.stopped = False  # the loop stopped for one (in every process, under torchrun)
        self.signal: int | None = None
        self.previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        self.signal = signum

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def now(self, step: int, info: distributed.DistInfo, every: int) -> bool:
        """Whether the loop stops after `step`: at once in one process; with several, at every `every`-th
        step and all together (one all-reduce of the flags, where the losses are read anyway), so that no
        process saves or leaves while another waits for it in a collective."""
        if info.enabled:
            if step % every:
                return False
            signum = torch.tensor([self.signal or 0], device=info.device)  # 0: no signal here
            signum = int(distributed.all_reduce_max(signum, info).item())
            self.stopped, self.signal = signum > 0, signum or None
        else:
            self.stopped = self.requested
        return self.stopped


class Clock:
    """What time asks of the loop after a step: training.max_time reached, an evaluation or a checkpoint due by
    evaluation.interval_time / output.save_interval_time (seconds of training, over resumes). With several
    processes they are decided every log interval and all together (one all-reduce), as a signal is."""

    def __init__(self, cfg: RunConfig, elapsed: float):
        self.budget = cfg.training.max_time
        self.eval_every, self.save_every = cfg.evaluation.interval_time, cfg.output.save_interval_time
        self.last_eval = self.last_save = elapsed

    @property
    def timed(self) -> bool:
        return any(x is not None for x in (self.budget, self.eval_every, self.save_every))

    def due(self, step: int, elapsed: float, info: distributed.DistInfo, every: int) -> tuple[bool, bool, bool]:
        """(out of time, an evaluation due, a checkpoint due) after `step`, at `elapsed` seconds."""
        if not self.timed or (info.enabled and step % every):
            return False, False, False
        flags = [
            self.budget is not None and elapsed >= self.budget,
            self.eval_every is not None and elapsed - self.last_eval >= self.eval_every,
            self.save_every is not None and elapsed - self.last_save >= self.save_every,
        ]
        if info.enabled:  # rank 0's clock and the others' differ a little: any one's due makes all due
            flags = distributed.all_reduce_max(torch.tensor(flags, device=info.device).long(), info).tolist()
        return tuple(bool(f) for f in flags)

    def evaluated(self, elapsed: float) -> None:
        self.last_eval = elapsed

    def saved(self, elapsed: float) -> None:
        self.last_save = elapsed


def train(cfg: RunConfig, run_dir: str | Path, resume: bool = False, accept_changes: bool = False) -> TrainResult:
    """Train `cfg` into `run_dir`; `resume` continues its latest checkpoint, refusing a changed config
    (see same_run.py) unless `accept_changes`."""
    run = RunDir(run_dir)
    info = distributed.setup(cfg.training.device)
    try:
        with hold_run_dir(run, info, resume), StopRequest() as stop, numerics(info.device, cfg.training.deterministic):
            result = run_loop(set_up(cfg, run, resume, accept_changes, info), stop)
            # every rank leaves together: one that tore its process group down while rank 0 still wrote the
            # last checkpoint died of SIGABRT ("terminate called without an active exception") now and then
            distributed.barrier(info)
            return result
    finally:
        distributed.teardown(info)


def run_loop(t: Training, stop: StopRequest) -> TrainResult:
    """Train from t.state.step to training.steps (or a signal, or early stopping); evaluate and save on schedule."""
    cfg, info, state = t.cfg, t.info, t.state
    amp = autocast(t.precision, info.device)
    rows = distributed.rows_for_rank(cfg.training.batch_size, info) if info.enabled else None
    pad = bucket_padding(cfg.training.bucket_length, cfg.training.batch_size, t.data.tokenizer.pad_id)
    batches = batch_stream(t.data.train, rows, info.device, cfg.training.data_workers, pad)
    bar = tqdm(
        total=cfg.training.steps, initial=state.step, disable=None if info.is_main else True, desc="train", unit="step"
    )  # None: off where stderr is not a terminal (logs, pipes), where StepLog prints progress lines instead
    peak = training_peak_tflops(info.device, t.precision, cfg.training.peak_tflops)
    text_progress = info.is_main and bar.disable  # rank 0, its stderr no terminal
    progress_of = cfg.training.steps if text_progress else None
    losses = StepLog(t.metrics, bar, state, info.device, peak, progress_of, cfg.training.max_time)
    clock = Clock(cfg, state.elapsed)
    last_eval, eval_step = None, None
    early_stopped = out_of_time = False
    scorer = GeneratedScores(cfg, t.data.tokenizer, t.model, t.generation) if cfg.evaluation.generate else None
    save_every = cfg.output.save_interval or cfg.evaluation.interval
    while state.step < cfg.training.steps:
        lr = lr_at(state.step, cfg)
        for group in t.optimizer.param_groups:
            group["lr"] = lr
        taken = [next(batches) for _ in range(cfg.training.grad_accum)]
        try:
            held = t.held if state.step < cfg.training.cross_attention_warmup else []
            ce_sum, aux, n_tokens = optimizer_step(
                t.wrapped, t.optimizer, taken, cfg, t.model_config, info, amp, t.scaler, t.teacher, held, t.loss_of
            )
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise
            raise step_out_of_memory(cfg, info.device) from None
        if t.ema is not None:
            t.ema.update(t.model)
        state.step += 1
        state.tokens += n_tokens
        flops = batches_flops(t.model_config, taken) if peak else None  # counted only where MFU is logged
        losses.add(state.step, ce_sum, n_tokens, aux, lr, flops, sum(b.global_source_tokens for b in taken))
        bar.update(1)

        out_of_time, eval_due, save_due = clock.due(state.step, losses.elapsed(), info, cfg.output.log_interval)
        evaluate_now = state.step % cfg.evaluation.interval == 0 or state.step == cfg.training.steps
        evaluate_now = evaluate_now or eval_due or out_of_time
        stopping = stop.now(state.step, info, cfg.output.log_interval)
        save_now = evaluate_now or state.step % save_every == 0 or stopping or save_due
        if save_now or state.step % cfg.output.log_interval == 0 or state.step == 1:
            diverged = losses.flush()  # the one host sync of these steps
            if diverged is not None:
                raise TrainingError(
                    f"the training loss is not a number at step {diverged} (too high a learning rate, or a model "
                    "setting such as norm_eps that divides by zero); the last checkpoint saved is kept"
                )
        if evaluate_now:
            last_eval, eval_step = _evaluation(t, scorer, amp), state.step
            clock.evaluated(losses.elapsed())
            t.metrics.write({"kind": "eval", "step": state.step, **last_eval})
            log.info("step %d: train %.4f, validation %.4f", state.step, last_eval["train_loss"], last_eval["val_loss"])
        if save_now:
            score = best_by_score(last_eval, cfg) if last_eval is not None else None
            is_best, improved = compare_to_best(score, state.best_val)
            if evaluate_now:
                state.evals_since_best = 0 if improved else state.evals_since_best + 1
            if evaluate_now and is_best:
                state.best_val = score
            state.elapsed = losses.elapsed()
            _save(t, evaluate_now and is_best)
            clock.saved(losses.elapsed())
        if evaluate_now or save_now:
            losses.restart_interval()  # tokens/s counts training time only
        if stopping:
            log.warning("stopped by signal at step %d; checkpoint saved", state.step)
            break
        if out_of_time:
            log.warning(
                "stopped at step %d: training.max_time (%g s) reached; evaluated and saved",
                state.step,
                cfg.training.max_time,
            )
            break
        patience = cfg.training.early_stopping_patience
        if evaluate_now and patience and state.evals_since_best >= patience:
            early_stopped = True
            log.warning(
                "stopped early at step %d: %d evaluations without a better %s", state.step, patience, cfg.output.best_by
            )
            break
    state.elapsed = losses.elapsed()
    bar.close()
    t.metrics.close()
    if last_eval is None and state.step >= cfg.training.steps:  # resumed at its end (a lost summary): its figures
        last_eval, eval_step = _evaluation(t, scorer, amp), state.step  # again, as its last evaluation's were
    return _finish(t, last_eval, eval_step, stop, early_stopped, out_of_time)


def _evaluation(t: Training, scorer: GeneratedScores | None, amp: AbstractContextManager) -> dict:
    """The evaluation's figures (and generated metrics, with evaluation.generate) of the model as it stands."""
    judged = t.ema.swapped_in(t.model) if t.cfg.training.ema_eval else nullcontext()
    with judged:  # training.ema_eval: the moving average is evaluated, the live weights train on
        figures = evaluate(t.wrapped, t.data, t.cfg, t.info, amp)
        if scorer is not None:  # every rank generates (FSDP's forward needs them all); rank 0 logs
            with amp:
                figures.update(scorer(t.model))
    return figures


def _finish(
    t: Training,
    last_eval: dict | None,
    eval_step: int | None,
    stop: StopRequest,
    early_stopped: bool,
    out_of_time: bool,
) -> TrainResult:
    """The run's result; on rank 0 also its curves and, unless interrupted, summary.json."""
    run, state, info = t.run, t.state, t.info
    history = read_metrics(run.metrics) if info.is_main else []
    if info.is_main and t.cfg.output.plot and history:
        plot_curves({run.name: history}, run.curves, title=run.name)
    train_losses = [r["loss"] for r in history if r.get("kind") == "train"]
    result = TrainResult(
        run_dir=run.path,
        steps=state.step,
        train_loss=last_eval["train_loss"] if last_eval else (train_losses[-1] if train_losses else None),
        val_loss=last_eval["val_loss"] if last_eval else None,
        parameters=t.parameters,
        parameters_without_positions=t.parameters_without_positions,
        wall_time=state.elapsed,
        tokens_per_s=state.tokens / max(state.elapsed, 1e-9),
        interrupted=stop.stopped,
        early_stopped=early_stopped,
        out_of_time=out_of_time,
        eval_step=eval_step if last_eval else None,
        signal=stop.signal,
        is_main=info.is_main,
        history=history,
    )
    if info.is_main and not result.interrupted:
        summary = {k: v for k, v in asdict(result).items() if k not in ("history", "run_dir")}
        summary = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in summary.items()}
        write_atomic(run.summary, json.dumps(summary, indent=2))
    return result


def _save(t: Training, is_best: bool) -> None:
    """Checkpoint the run as it stands (every rank takes part; rank 0 writes)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = _full_model_state(t.model, t.wrapped, t.info)
    if t.base is not None:  # a LoRA run keeps its adapters (and train_only's parameters) alone
        model_state = trainable_state(t.model, model_state)
    optimizer_state = get_optimizer_state_dict(t.wrapped, t.optimizer, options=options)
    states = distributed.gather_objects(rng_states(t.info.device), t.info)  # every rank's, for an exact resume
    if not t.info.is_main:
        return
    rng = {"torch": states[0]["cpu"]}  # rank 0's CPU state, under the name older checkpoints use
    for rank, state_of_rank in enumerate(states):
        rng.update({f"{kind}_rank{rank}": value for kind, value in state_of_rank.items() if (kind, rank) != ("cpu", 0)})
    files = {
        "model": model_state,
        "optimizer": optimizer_state,
        "rng": rng,
        "state": {
            "train": asdict(t.state),
            "data": t.data.train.state_dict(),
            **({"scaler": t.scaler.state_dict()} if t.scaler is not None else {}),
        },
        "config": lambda path: save_config(t.cfg, path),
        "tokenizer": t.data.tokenizer,
        **description_files(t.cfg.description(t.model)),  # what inference reads instead of the config
        "generation": t.generation,
        "base": t.base,
        "ema": t.ema.state_dict() if t.ema is not None else None,
        "teacher": asdict(t.teacher.pointer) if t.teacher is not None else None,
    }
    save_checkpoint(t.run, t.state.step, files, t.cfg.output.keep_last, is_best)


def _full_model_state(model: nn.Module, wrapped: nn.Module, info: distributed.DistInfo) -> dict:
    if not info.enabled:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(wrapped, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
