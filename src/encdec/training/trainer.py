"""The training loop, read top to bottom: `train(cfg, run_dir)`.

    build tokenizer, data, model, optimizer  (or restore them from the latest checkpoint)
    for each step:  lr from the schedule; grad-accumulated micro-batches; clip; AdamW
                    every `output.log_interval` steps read the losses and log them;
                    every `evaluation.interval` steps evaluate and checkpoint
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
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from encdec.data.batch import IGNORE_INDEX
from encdec.errors import CheckpointError, ConfigError
from encdec.models import build_model, count_parameters
from encdec.training import distributed
from encdec.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from encdec.training.config import RunConfig, build_model_config, load_config, save_config
from encdec.training.data import RunData, build_run_data
from encdec.training.loader import LoadedBatch, batch_stream, local_rows
from encdec.training.memory import check_model_fits, is_out_of_memory, step_out_of_memory
from encdec.training.metrics import MetricsLog, plot_curves, read_metrics, tensorboard_available
from encdec.training.numerics import (
    autocast,
    checkpoint_activations,
    grad_scaler,
    numerics,
    resolve_precision,
    rng_states,
    set_rng_states,
)
from encdec.training.optim import build_optimizer, lr_at
from encdec.training.pretrained import load_pretrained, load_pretrained_weights, read_generation
from encdec.training.run_dir import hold_run_dir
from encdec.training.same_run import resumed_config
from encdec.training.samples import GeneratedScores

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Run-time state saved in checkpoints (never in the config)."""

    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0  # seconds of training, summed over resumes
    best_val: float | None = None  # the best score of output.best_by (val_loss, or minus the metric)
    evals_since_best: int = 0  # evaluations since best_val improved (early stopping)


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
    signal: int | None = None  # the signal that stopped the run, if one did
    is_main: bool = True  # False on the other processes under torchrun
    history: list = field(default_factory=list)


class StopRequest:
    """Turns SIGINT / SIGTERM into a flag the loop checks after each step."""

    def __init__(self):
        self.requested = False
        self.signal: int | None = None
        self.previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True
        self.signal = signum

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def train(cfg: RunConfig, run_dir: str | Path, resume: bool = False, accept_changes: bool = False) -> TrainResult:
    """Train `cfg` into `run_dir`; `resume` continues its latest checkpoint, refusing a changed config
    (see same_run.py) unless `accept_changes`."""
    run_dir = Path(run_dir)
    info = distributed.setup(cfg.training.device)
    try:
        with hold_run_dir(run_dir, info), StopRequest() as stop, numerics(info.device, cfg.training.deterministic):
            return _train(cfg, run_dir, resume, accept_changes, info, stop)
    finally:
        distributed.teardown(info)


def _train(cfg: RunConfig, run_dir: Path, resume: bool, accept_changes: bool, info, stop: StopRequest) -> TrainResult:
    if cfg.training.threads:
        torch.set_num_threads(cfg.training.threads)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if not resume and latest_checkpoint(run_dir) is not None:
        raise ConfigError(f"{run_dir} already holds checkpoints; pass --resume to continue it or choose another --out")
    if resume and checkpoint is None:
        log.info("no checkpoint in %s: starting from scratch", run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.training.seed)

    parts = load_checkpoint(checkpoint) if checkpoint is not None else None
    changes = {}
    if parts is not None:  # the same run, or changes the user accepted
        cfg, changes = resumed_config(cfg, saved_config(checkpoint), accept_changes)
    pretrained = None
    if parts is None and cfg.training.init_from:  # fine-tuning starts from another run or a Hugging Face checkpoint
        pretrained = load_pretrained(cfg.training.init_from)
        cfg = replace(cfg, model={**pretrained.model_section, **cfg.model})
    tokenizer_dir = checkpoint / "tokenizer" if checkpoint else pretrained.tokenizer_dir if pretrained else None
    data = build_run_data(cfg, run_dir, tokenizer_dir=tokenizer_dir)
    tok = data.tokenizer
    model_cfg = build_model_config(cfg.model, tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id)
    check_model_fits(model_cfg, info.device)
    try:
        model = build_model(model_cfg)
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        raise ConfigError(f"building the model ran out of memory ({str(error).splitlines()[0][:120]})") from None
    model.generation_defaults = read_generation(checkpoint) if checkpoint else pretrained.generation if pretrained else {}
    if pretrained is not None:
        load_pretrained_weights(model, pretrained)
        del pretrained  # the weights are in the model now
    state = TrainState()
    if parts is not None:
        try:
            model.load_state_dict(parts["model"])
        except RuntimeError as error:
            raise CheckpointError(f"{checkpoint} does not fit the model this config builds "
                                  f"({str(error).splitlines()[-1].strip()[:160]})") from None  # fmt: skip
        state = saved_train_state(parts["state"], checkpoint)
        data.train.load_state_dict(parts["state"]["data"])
    model.to(info.device)
    if cfg.training.activation_checkpointing:
        log.info("activation checkpointing: %d blocks recompute their activations in backward",
                 checkpoint_activations(model))  # fmt: skip
    if parts is not None:
        _restore_rng(parts["rng"], info)
    precision = resolve_precision(cfg.training.precision, info.device, cfg.training.distributed if info.enabled else None)
    scaler = grad_scaler(precision, info.device)
    if scaler is not None and parts is not None and "scaler" in parts["state"]:
        scaler.load_state_dict(parts["state"]["scaler"])
    n_params, n_params_no_pos = count_parameters(model), count_parameters(model, exclude_positions=True)
    wrapped = distributed.wrap(model, info, cfg.training.distributed, precision)
    if cfg.training.compile:
        wrapped = torch.compile(wrapped)
    fused = info.device.type == "cuda" and not (info.enabled and cfg.training.distributed == "fsdp")
    optimizer = build_optimizer(wrapped, cfg, fused=fused)
    if parts is not None:
        _load_optimizer(wrapped, optimizer, parts["optimizer"], info)
    if info.is_main:
        save_config(cfg, run_dir / "config.yaml")
    board = cfg.output.tensorboard if cfg.output.tensorboard is not None else tensorboard_available()
    if board and not tensorboard_available():
        raise ConfigError("output.tensorboard is true but the tensorboard package is missing: "
                          "pip install 'encdec[tensorboard]'")  # fmt: skip
    metrics = MetricsLog(run_dir / "metrics.jsonl", state.step if parts else None, info.is_main, board)
    if changes:
        metrics.write({"kind": "config_change", "step": state.step, "changes": changes})
        log.warning("resumed at step %d with config changes: %s", state.step, ", ".join(changes))
    log.info("model %s: %s parameters, %s on %s", model_cfg.family, f"{n_params:,}", precision, info.device)

    amp = autocast(precision, info.device)
    rows = distributed.rows_for_rank(cfg.training.batch_size, info) if info.enabled else None
    batches = batch_stream(data.train, rows, info.device, cfg.training.data_workers)
    bar = tqdm(total=cfg.training.steps, initial=state.step, disable=None if info.is_main else True, desc="train",
               unit="step")  # None: off where stderr is not a terminal (logs, pipes)
    losses = StepLog(metrics, bar, state, info.device)
    last_eval = None
    early_stopped = False
    scorer = GeneratedScores(cfg, data.tokenizer, model, info.device) if cfg.evaluation.generate else None
    save_every = cfg.output.save_interval or cfg.evaluation.interval
    while state.step < cfg.training.steps:
        lr = lr_at(state.step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        taken = [next(batches) for _ in range(cfg.training.grad_accum)]
        try:
            ce_sum, aux, n_tokens = _optimizer_step(wrapped, optimizer, taken, cfg, info, amp, scaler)
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise
            raise step_out_of_memory(cfg, info.device) from None
        state.step += 1
        state.tokens += n_tokens
        losses.add(state.step, ce_sum, n_tokens, aux, lr)
        bar.update(1)

        evaluate_now = state.step % cfg.evaluation.interval == 0 or state.step == cfg.training.steps
        save_now = evaluate_now or state.step % save_every == 0 or stop.requested
        if save_now or state.step % cfg.output.log_interval == 0 or state.step == 1:
            losses.flush()  # the one host sync of these steps
        if evaluate_now:
            last_eval = evaluate(wrapped, data, cfg, info, amp)
            if scorer is not None:  # every rank generates (FSDP's forward needs them all); rank 0 logs
                with amp:
                    last_eval.update(scorer(model))
            metrics.write({"kind": "eval", "step": state.step, **last_eval})
            log.info("step %d: train %.4f, validation %.4f", state.step, last_eval["train_loss"], last_eval["val_loss"])
        if save_now:
            score = best_by_score(last_eval, cfg) if last_eval is not None else None
            is_best = score is not None and (state.best_val is None or score < state.best_val)
            if evaluate_now:
                state.evals_since_best = 0 if is_best else state.evals_since_best + 1
            if evaluate_now and is_best:
                state.best_val = score
            state.elapsed = losses.elapsed()
            _save(run_dir, model, wrapped, optimizer, data, cfg, state, info, evaluate_now and is_best, scaler)
        if evaluate_now or save_now:
            losses.restart_interval()  # tokens/s counts training time only
        if stop.requested:
            log.warning("stopped by signal at step %d; checkpoint saved", state.step)
            break
        patience = cfg.training.early_stopping_patience
        if evaluate_now and patience and state.evals_since_best >= patience:
            early_stopped = True
            log.warning("stopped early at step %d: %d evaluations without a better %s", state.step, patience,
                        cfg.output.best_by)  # fmt: skip
            break
    state.elapsed = losses.elapsed()
    bar.close()
    metrics.close()

    history = read_metrics(run_dir / "metrics.jsonl") if info.is_main else []
    if info.is_main and cfg.output.plot and history:
        plot_curves({run_dir.name: history}, run_dir / "curves.png", title=f"{run_dir.name}")
    train_losses = [r["loss"] for r in history if r.get("kind") == "train"]
    result = TrainResult(
        run_dir=run_dir,
        steps=state.step,
        train_loss=last_eval["train_loss"] if last_eval else (train_losses[-1] if train_losses else None),
        val_loss=last_eval["val_loss"] if last_eval else None,
        parameters=n_params,
        parameters_without_positions=n_params_no_pos,
        wall_time=state.elapsed,
        tokens_per_s=state.tokens / max(state.elapsed, 1e-9),
        interrupted=stop.requested,
        early_stopped=early_stopped,
        signal=stop.signal,
        is_main=info.is_main,
        history=history,
    )
    if info.is_main and not result.interrupted:
        summary = {k: v for k, v in asdict(result).items() if k not in ("history", "run_dir")}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return result


class StepLog:
    """Per-step losses kept on the device and read in one transfer per log interval, then written.

    Every step still gets its own record; `tokens_per_s` is its interval's training rate
    (evaluation and checkpointing excluded) and `elapsed` the run's wall time at that step,
    spread evenly over the interval's steps; `grad_norm` is the gradient's norm before
    clipping and, on a GPU, `peak_memory_mib` the interval's peak allocation.
    """

    def __init__(self, metrics: MetricsLog, bar, state: TrainState, device: torch.device):
        self.metrics, self.bar, self.state, self.device = metrics, bar, state, device
        self.pending: list[tuple[int, torch.Tensor, int, dict, float]] = []
        self.started = time.perf_counter() - state.elapsed  # wall clock of step 0, over resumes
        self.interval_started = time.perf_counter()
        self.flushed_elapsed = state.elapsed

    def add(self, step: int, ce_sum: torch.Tensor, n_tokens: int, aux: dict, lr: float) -> None:
        self.pending.append((step, ce_sum, n_tokens, aux, lr))

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

    def flush(self) -> None:
        if not self.pending:
            return
        names = sorted(self.pending[0][3])
        rows = [torch.stack([ce_sum.float(), *(aux[n].float() for n in names)]) for _, ce_sum, _, aux, _ in self.pending]
        values = torch.stack(rows).tolist()  # (steps, 1 + aux): the one wait for the device
        peak_mib = self.peak_memory_mib()
        now, elapsed = time.perf_counter(), self.elapsed()
        tokens = sum(n for _, _, n, _, _ in self.pending)
        tokens_per_s = tokens / max(now - self.interval_started, 1e-9)
        first_tokens = self.state.tokens - tokens
        for i, ((step, _, n_tokens, _, lr), row) in enumerate(zip(self.pending, values, strict=True)):
            first_tokens += n_tokens
            at = self.flushed_elapsed + (elapsed - self.flushed_elapsed) * (i + 1) / len(self.pending)
            record = {"kind": "train", "step": step, "loss": row[0] / max(n_tokens, 1), "lr": lr,
                      "tokens_per_s": tokens_per_s, "tokens": first_tokens, "elapsed": at}  # fmt: skip
            if peak_mib is not None:
                record["peak_memory_mib"] = peak_mib
            self.metrics.write({**record, **dict(zip(names, row[1:], strict=True))})
        self.bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}", tok_s=f"{tokens_per_s:,.0f}")
        self.pending.clear()
        self.flushed_elapsed = elapsed
        self.interval_started = now


def smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Mean cross-entropy against targets mixed with `smoothing` of a uniform distribution, over the tokens
    with a label; logits (B, T, V), labels (B, T). The logged loss stays the plain cross-entropy."""
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                           label_smoothing=smoothing)  # fmt: skip


def _optimizer_step(model, optimizer, batches: list[LoadedBatch], cfg: RunConfig, info, amp, scaler=None):
    """One optimizer step over `grad_accum` global batches -> (CE sum over the batch's tokens, on the
    device; aux losses, on the device; loss tokens, a host int). Nothing here waits for the device.

    The loss is averaged over every target token of the global batch, whichever
    process and micro-batch holds it, so W processes match one exactly.
    """
    accum, smoothing = len(batches), cfg.training.label_smoothing
    n_tokens = sum(b.global_tokens for b in batches)
    ce_sum = torch.zeros((), device=info.device)
    aux_sums: dict[str, torch.Tensor] = {}
    for i, loaded in enumerate(batches):
        local = loaded.to(info.device)
        with distributed.gradient_sync(model, enabled=i == accum - 1):
            with amp:
                out = model(local.src_ids, local.tgt_ids, src_mask=local.src_mask, labels=local.labels, **local.packing)
            share = loaded.num_tokens / max(n_tokens, 1) * info.world_size
            target = smoothed_cross_entropy(out.logits, local.labels, smoothing) if smoothing else out.ce_loss
            loss = target * share + (out.loss - out.ce_loss) / accum  # + the family's own, unsmoothed terms
            (scaler.scale(loss) if scaler is not None else loss).backward()
        ce_sum += out.ce_loss.detach().float() * loaded.num_tokens
        for name, value in out.aux_losses.items():
            aux_sums[name] = aux_sums.get(name, 0.0) + value.detach().float() / accum
    if batches[0].positions:  # the share of computed positions holding real tokens (objective.pack raises it)
        filled = sum(b.filled for b in batches) / sum(b.positions for b in batches)
        aux_sums["fill"] = torch.tensor(filled, device=info.device)  # a host number: the copy does not wait
    if scaler is not None:
        scaler.unscale_(optimizer)  # true gradients for the norm and the clip
    if cfg.training.clip_norm > 0:  # the norm before clipping, logged as grad_norm
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.clip_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    aux_sums["grad_norm"] = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: a DTensor
    if scaler is not None:
        scaler.step(optimizer)  # skipped when the gradients overflowed; the scale then shrinks
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return distributed.all_reduce_sum(ce_sum, info), aux_sums, n_tokens


@torch.no_grad()
def evaluate(model, data: RunData, cfg: RunConfig, info, amp=nullcontext()) -> dict:
    """Mean cross-entropy over `evaluation.steps` batches of train and of validation.

    The evaluation batches are drawn by freshly seeded objectives, so every
    evaluation sees the same batches and training's RNG is not disturbed.
    """
    model.eval()
    rows = distributed.rows_for_rank(cfg.training.batch_size, info) if info.enabled else None
    result = {}
    for split in ("train", "val"):
        objective = data.eval_objective(split)
        ce_sum, tokens = torch.zeros((), device=info.device), 0
        for _ in range(cfg.evaluation.steps):
            loaded = local_rows(objective.next_batch(), rows)
            local = loaded.to(info.device)
            with amp:
                out = model(local.src_ids, local.tgt_ids, src_mask=local.src_mask, labels=local.labels, **local.packing)
            ce_sum += out.ce_loss.float() * loaded.num_tokens
            tokens += loaded.num_tokens
        total = torch.stack([ce_sum, torch.tensor(float(tokens), device=info.device)])  # (CE * tokens, tokens)
        total = distributed.all_reduce_sum(total, info)
        result[f"{split}_loss"] = (total[0] / total[1]).item()  # 0 / 0 is nan: no tokens to score
    model.train()
    return result


def best_by_score(last_eval: dict, cfg: RunConfig) -> float:
    """The number the best checkpoint minimises: the validation loss, or minus the generation metric."""
    if cfg.output.best_by == "metric":
        return -last_eval[f"val_{cfg.evaluation.metric}"]
    return last_eval["val_loss"]


def saved_config(checkpoint: Path) -> RunConfig:
    try:
        return load_config(checkpoint / "config.yaml", paths_from_file=False)
    except ConfigError as error:
        raise CheckpointError(f"the config saved in {checkpoint} cannot be read: {error}") from None


def saved_train_state(saved: dict, checkpoint: Path) -> TrainState:
    try:
        return TrainState(**saved["train"])
    except (TypeError, KeyError):
        raise CheckpointError(f"{checkpoint / 'state.json'} does not hold the training state this version writes") from None


def _save(run_dir, model, wrapped, optimizer, data, cfg, state, info, is_best, scaler=None):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = _full_model_state(model, wrapped, info)
    optimizer_state = get_optimizer_state_dict(wrapped, optimizer, options=options)
    states = distributed.gather_objects(rng_states(info.device), info)  # every rank's, for an exact resume
    if not info.is_main:
        return
    rng = {"torch": states[0]["cpu"]}  # rank 0's CPU state, under the name older checkpoints use
    for rank, state_of_rank in enumerate(states):
        rng.update({f"{kind}_rank{rank}": value for kind, value in state_of_rank.items() if (kind, rank) != ("cpu", 0)})
    files = {
        "model": model_state,
        "optimizer": optimizer_state,
        "rng": rng,
        "state": {"train": asdict(state), "data": data.train.state_dict(),
                  **({"scaler": scaler.state_dict()} if scaler is not None else {})},
        "config": lambda path: save_config(cfg, path),
        "tokenizer": data.tokenizer,
        "generation": model.generation_defaults,
    }
    save_checkpoint(run_dir, state.step, files, cfg.output.keep_last, is_best)


def _full_model_state(model, wrapped, info) -> dict:
    if not info.enabled:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(wrapped, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _restore_rng(saved: dict, info) -> None:
    """This rank's RNG states from a checkpoint (older checkpoints hold only the CPU state, as "torch")."""
    states = {"cpu": saved.get(f"cpu_rank{info.rank}", saved["torch"])}
    if f"cuda_rank{info.rank}" in saved:
        states["cuda"] = saved[f"cuda_rank{info.rank}"]
    if not set_rng_states(states, info.device):
        log.warning("the checkpoint holds no GPU random state for rank %d: dropout will not repeat the "
                    "uninterrupted run's masks", info.rank)  # fmt: skip


def _load_optimizer(wrapped, optimizer, state: dict, info) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(wrapped, optimizer, state, options=StateDictOptions(full_state_dict=True))
