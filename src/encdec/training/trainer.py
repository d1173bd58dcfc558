"""The training loop, read top to bottom: `train(cfg, run_dir)`.

    build tokenizer, data, model, optimizer  (or restore them from the latest checkpoint)
    for each step:  lr from the schedule; grad-accumulated micro-batches; clip; AdamW
                    log the step; every `evaluation.interval` steps evaluate and checkpoint
    at the end:     the curves as a PNG

A run is deterministic on CPU for a given seed, and `resume=True` continues
from the latest checkpoint so exactly that the logged losses equal those of an
uninterrupted run. SIGINT and SIGTERM finish the current step, save, and return.
"""

import json
import logging
import math
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm

from encdec.errors import CheckpointError, ConfigError
from encdec.models import build_model, count_parameters
from encdec.training import distributed
from encdec.training.checkpoint import latest_checkpoint, load_checkpoint, load_weights, read_pointer, save_checkpoint
from encdec.training.config import RunConfig, build_model_config, load_config, save_config
from encdec.training.data import RunData, build_run_data
from encdec.training.metrics import MetricsLog, plot_curves, read_metrics
from encdec.training.optim import build_optimizer, lr_at

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Run-time state saved in checkpoints (never in the config)."""

    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0  # seconds of training, summed over resumes
    best_val: float | None = None


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
    is_main: bool = True  # False on the other processes under torchrun
    history: list = field(default_factory=list)


class StopRequest:
    """Turns SIGINT / SIGTERM into a flag the loop checks after each step."""

    def __init__(self):
        self.requested = False
        self.previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def train(cfg: RunConfig, run_dir: str | Path, resume: bool = False) -> TrainResult:
    run_dir = Path(run_dir)
    info = distributed.setup(cfg.training.device)
    try:
        with StopRequest() as stop:
            return _train(cfg, run_dir, resume, info, stop)
    finally:
        distributed.teardown(info)


def _train(cfg: RunConfig, run_dir: Path, resume: bool, info, stop: StopRequest) -> TrainResult:
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
    pretrained = _pretrained_checkpoint(cfg) if parts is None else None  # fine-tuning starts from another run
    if pretrained is not None:
        cfg = replace(cfg, model=_inherited_model_section(cfg, pretrained))
    tokenizer_source = checkpoint or pretrained
    data = build_run_data(cfg, run_dir, tokenizer_dir=tokenizer_source / "tokenizer" if tokenizer_source else None)
    tok = data.tokenizer
    model_cfg = build_model_config(cfg.model, tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id)
    model = build_model(model_cfg)
    if pretrained is not None:
        _load_pretrained(model, pretrained)
    state = TrainState()
    if parts is not None:
        model.load_state_dict(parts["model"])
        state = TrainState(**parts["state"]["train"])
        data.train.load_state_dict(parts["state"]["data"])
        torch.set_rng_state(parts["rng"]["torch"])
    model.to(info.device)
    n_params, n_params_no_pos = count_parameters(model), count_parameters(model, exclude_positions=True)
    wrapped = distributed.wrap(model, info, cfg.training.distributed)
    if cfg.training.compile:
        wrapped = torch.compile(wrapped)
    optimizer = build_optimizer(wrapped, cfg)
    if parts is not None:
        _load_optimizer(wrapped, optimizer, parts["optimizer"], info)
    if info.is_main:
        save_config(cfg, run_dir / "config.yaml")
    metrics = MetricsLog(run_dir / "metrics.jsonl", state.step if parts else None, enabled=info.is_main)
    log.info("model %s: %s parameters", model_cfg.family, f"{n_params:,}")

    autocast = (
        torch.autocast(info.device.type, dtype=torch.bfloat16) if cfg.training.precision == "bf16" else nullcontext()
    )
    bar = tqdm(total=cfg.training.steps, initial=state.step, disable=not info.is_main, desc="train", unit="step")
    last_eval = None
    started = time.perf_counter() - state.elapsed
    while state.step < cfg.training.steps:
        step_started = time.perf_counter()
        lr = lr_at(state.step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss, aux, n_tokens = _optimizer_step(wrapped, optimizer, data, cfg, info, autocast)
        state.step += 1
        state.tokens += n_tokens
        state.elapsed = time.perf_counter() - started
        tokens_per_s = n_tokens / max(time.perf_counter() - step_started, 1e-9)
        metrics.write({"kind": "train", "step": state.step, "loss": loss, "lr": lr, "tokens_per_s": tokens_per_s, **aux})
        bar.update(1)
        if state.step % cfg.output.log_interval == 0 or state.step == 1:
            bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")

        evaluate_now = state.step % cfg.evaluation.interval == 0 or state.step == cfg.training.steps
        if evaluate_now:
            last_eval = evaluate(wrapped, data, cfg, info, autocast)
            metrics.write({"kind": "eval", "step": state.step, **last_eval})
            log.info("step %d: train %.4f, validation %.4f", state.step, last_eval["train_loss"], last_eval["val_loss"])
        save_every = cfg.output.save_interval or cfg.evaluation.interval
        if evaluate_now or state.step % save_every == 0 or stop.requested:
            is_best = last_eval is not None and (state.best_val is None or last_eval["val_loss"] < state.best_val)
            if evaluate_now and is_best:
                state.best_val = last_eval["val_loss"]
            _save(run_dir, model, wrapped, optimizer, data, cfg, state, info, evaluate_now and is_best)
        if stop.requested:
            log.warning("stopped by signal at step %d; checkpoint saved", state.step)
            break
    bar.close()

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
        is_main=info.is_main,
        history=history,
    )
    if info.is_main and not result.interrupted:
        summary = {k: v for k, v in asdict(result).items() if k not in ("history", "run_dir")}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return result


def _optimizer_step(model, optimizer, data: RunData, cfg: RunConfig, info, autocast):
    """One optimizer step over `grad_accum` global batches; returns (mean CE, aux losses, tokens).

    The loss is averaged over every target token of the global batch, whichever
    process and micro-batch holds it, so W processes match one exactly.
    """
    accum = cfg.training.grad_accum
    batches = [data.train.next_batch() for _ in range(accum)]
    n_tokens = sum(b.num_tokens for b in batches)
    ce_sum = torch.zeros((), device=info.device)
    aux_sums: dict[str, torch.Tensor] = {}
    for i, batch in enumerate(batches):
        local = _rank_rows(batch, info)
        with distributed.no_sync(model, last_micro_step=i == accum - 1), autocast:
            out = model(local.src_ids, local.tgt_ids, src_mask=local.src_mask, labels=local.labels)
            share = local.num_tokens / n_tokens * info.world_size
            loss = out.ce_loss * share + (out.loss - out.ce_loss) / accum
        loss.backward()
        ce_sum += out.ce_loss.detach().float() * local.num_tokens
        for name, value in out.aux_losses.items():
            aux_sums[name] = aux_sums.get(name, 0.0) + value.detach().float() / accum
    if cfg.training.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.clip_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ce = distributed.all_reduce_sum(ce_sum, info).item() / max(n_tokens, 1)
    aux = {name: value.item() for name, value in aux_sums.items()}
    return ce, aux, n_tokens


@torch.no_grad()
def evaluate(model, data: RunData, cfg: RunConfig, info, autocast=nullcontext()) -> dict:
    """Mean cross-entropy over `evaluation.steps` batches of train and of validation.

    The evaluation batches are drawn by freshly seeded objectives, so every
    evaluation sees the same batches and training's RNG is not disturbed.
    """
    model.eval()
    result = {}
    for split in ("train", "val"):
        objective = data.eval_objective(split)
        total = torch.zeros(2, device=info.device)  # (sum of CE * tokens, tokens)
        for _ in range(cfg.evaluation.steps):
            batch = objective.next_batch()
            local = _rank_rows(batch, info)
            with autocast:
                out = model(local.src_ids, local.tgt_ids, src_mask=local.src_mask, labels=local.labels)
            total += torch.stack([out.ce_loss.float() * local.num_tokens, torch.tensor(float(local.num_tokens))])
        total = distributed.all_reduce_sum(total, info)
        result[f"{split}_loss"] = (total[0] / total[1]).item() if total[1] > 0 else math.nan
    model.train()
    return result


def _pretrained_checkpoint(cfg: RunConfig) -> Path | None:
    """The best (else latest) checkpoint of the run `training.init_from` names."""
    if not cfg.training.init_from:
        return None
    root = Path(cfg.training.init_from) / "checkpoints"
    name = read_pointer(root, "best") or read_pointer(root, "latest")
    if name is None:
        raise CheckpointError(f"training.init_from {cfg.training.init_from} is not a run directory with checkpoints")
    return root / name


def _inherited_model_section(cfg: RunConfig, checkpoint: Path) -> dict:
    """The pretrained run's model section with this config's model keys on top (dropout, say).

    A fine-tuning config need not repeat the architecture it starts from; the merged
    section is what this run saves, so it is self-contained.
    """
    try:
        pretrained = load_config(checkpoint / "config.yaml").model
    except ConfigError as error:
        raise CheckpointError(f"the pretrained run's config cannot be read: {error}") from None
    return {**pretrained, **cfg.model}


def _load_pretrained(model, checkpoint: Path) -> None:
    try:
        model.load_state_dict(load_weights(checkpoint / "model.safetensors"))
    except RuntimeError as error:
        raise CheckpointError(
            f"the model section does not match the pretrained run {checkpoint} ({str(error).splitlines()[0]})"
        ) from None
    log.info("initialised from %s", checkpoint)


def _rank_rows(batch, info):
    """This process's rows of a global batch, on its device."""
    if info.enabled:
        rows = distributed.rows_for_rank(batch.batch_size, info)
        fields = ("tgt_ids", "labels", "src_ids", "src_mask", "prefix_lengths")
        batch = replace(batch, **{f: getattr(batch, f)[rows] for f in fields if getattr(batch, f) is not None})
    return batch.to(info.device)


def _save(run_dir, model, wrapped, optimizer, data, cfg, state, info, is_best):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = _full_model_state(model, wrapped, info)
    optimizer_state = get_optimizer_state_dict(wrapped, optimizer, options=options)
    if not info.is_main:
        return
    rng = {"torch": torch.get_rng_state()}
    files = {
        "model": model_state,
        "optimizer": optimizer_state,
        "rng": rng,
        "state": {"train": asdict(state), "data": data.train.state_dict()},
        "config": lambda path: save_config(cfg, path),
        "tokenizer": data.tokenizer,
    }
    save_checkpoint(run_dir, state.step, files, cfg.output.keep_last, is_best)


def _full_model_state(model, wrapped, info) -> dict:
    if not info.enabled:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(wrapped, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _load_optimizer(wrapped, optimizer, state: dict, info) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(wrapped, optimizer, state, options=StateDictOptions(full_state_dict=True))
