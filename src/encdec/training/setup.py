"""Where a training starts: `set_up` builds (or restores from the latest checkpoint) everything the
loop works with into one `Training`.

    starting point  the latest checkpoint (resume: the same config, or accepted changes), another
                    run or a Hugging Face directory (training.init_from), or nothing
    then            tokenizer and data, model (weights, RNG), a distillation teacher (training.distill),
                    precision, wrapping (DDP / FSDP / torch.compile), optimizer, config.yaml and metrics.jsonl
"""

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from encdec.data.objectives.factory import longest_rows
from encdec.data.objectives.transcribe import transcription_prompt
from encdec.errors import CheckpointError, ConfigError
from encdec.models import ModelConfig, build_model, count_parameters
from encdec.models.family_classes import check_position_limits
from encdec.models.model_config import CAUSAL_LMS, SPEECH_FAMILIES
from encdec.runs.adapter import BasePointer, apply_lora, load_adapted, read_base
from encdec.runs.checkpoint import load_checkpoint, load_state
from encdec.runs.load import read_generation
from encdec.runs.pointer import source_path, weights_sha256
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.runs.state import TrainState, check_rng_states, read_saved_state
from encdec.safe_paths import write_atomic
from encdec.sizing import choose_threads
from encdec.tokenizers.pretrained import check_tokenizer_files
from encdec.training import distributed
from encdec.training.adaptation import ADAPTATION_FILE, adapted_section, wants_adaptation, warmup_frozen
from encdec.training.adaptation import summary as adaptation_summary
from encdec.training.distill import Teacher, find_teacher, load_teacher, share_encoder, teacher_bytes
from encdec.training.ema import WeightAverage
from encdec.training.init_from import Pretrained, check_weights_fit, load_pretrained, load_pretrained_weights
from encdec.training.launch import check_processes
from encdec.training.memory import check_activations_fit, check_model_fits, check_step_size, is_out_of_memory
from encdec.training.metrics import MetricsLog, tensorboard_available
from encdec.training.numerics import checkpoint_activations, grad_scaler, resolve_precision, set_rng_states
from encdec.training.optim import build_optimizer, state_layout
from encdec.training.optimizer_step import step_loss
from encdec.training.run_config import (
    DECODER_ONLY_OBJECTIVES,
    RunConfig,
    member_objective,
    save_config,
    saved_config,
)
from encdec.training.run_data import RunData, build_run_data, objective_options
from encdec.training.run_lock import refuse_checkpoints_unless_resumed
from encdec.training.same_run import decided_by_source, resumed_config

log = logging.getLogger(__name__)


@dataclass
class Training:
    """Everything the loop works with, built (or restored from a checkpoint) once by `set_up`."""

    cfg: RunConfig
    run: RunDir
    info: distributed.DistInfo
    data: RunData
    model: nn.Module  # the model itself: what checkpoints hold and generation runs
    wrapped: nn.Module  # what runs the steps: the model under DDP / FSDP (and torch.compile with them)
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None  # fp16's loss scale
    precision: str  # fp32, bf16 or fp16
    state: TrainState
    metrics: MetricsLog
    parameters: int
    parameters_without_positions: int
    generation: dict[str, Any] = field(default_factory=dict)  # the generation defaults its checkpoints carry
    base: dict[str, str] | None = None  # a LoRA run's base pointer (runs/adapter.py), saved beside each adapter
    ema: WeightAverage | None = None  # training.ema_decay's moving average of the weights
    teacher: Teacher | None = None  # training.distill's frozen teacher: in no optimizer, wrapper or checkpoint
    held: list[nn.Parameter] = field(default_factory=list)  # still for training.cross_attention_warmup's steps
    loss_of: Callable = step_loss  # a micro-batch's forward and loss: compiled whole with training.compile

    @property
    def model_config(self) -> ModelConfig:
        return self.model.config


@dataclass
class StartingPoint:
    """Where a run starts: its latest checkpoint (resume), another run or HF directory (fine-tuning), or nothing."""

    cfg: RunConfig  # the config to train with: the saved one on resume, the merged one when fine-tuning
    checkpoint: CheckpointDir | None = None
    parts: dict | None = None  # the checkpoint's contents
    changes: dict = field(default_factory=dict)  # config changes a resume accepted
    pretrained: Pretrained | None = None

    @property
    def tokenizer_dir(self) -> Path | None:
        if self.checkpoint is not None:
            return self.checkpoint.tokenizer
        return self.pretrained.tokenizer_dir if self.pretrained is not None else None

    @property
    def generation(self) -> dict:
        if self.checkpoint is not None:
            return read_generation(self.checkpoint)
        return self.pretrained.generation if self.pretrained is not None else {}


def starting_point(cfg: RunConfig, run: RunDir, resume: bool, accept_changes: bool) -> StartingPoint:
    latest = run.latest()
    refuse_checkpoints_unless_resumed(run, resume)
    if resume and latest is None:
        log.info("no checkpoint in %s: starting from scratch", run.path)
    if resume and latest is not None:  # the same run, or changes the user accepted
        saved = saved_config(latest)  # whole and checked, before the parts it declares are read
        parts = load_checkpoint(latest)
        cfg, changes = resumed_config(cfg, saved, accept_changes)
        return StartingPoint(cfg, latest, parts, changes)
    if cfg.training.init_from:  # fine-tuning starts from another run or a Hugging Face checkpoint
        pretrained = load_pretrained(cfg.training.init_from)
        if wants_adaptation(pretrained.model_section, cfg.model):  # a decoder-only model into an encoder-decoder
            pretrained = adaptation_source(cfg, pretrained)
        elif cfg.training.init_decoder_from:
            raise ConfigError(
                "training.init_decoder_from adapts decoder-only models into an encoder-decoder: init_from must be a "
                "decoder-only model and model.family encoder_decoder"
            )
        cfg = source_decides(cfg, pretrained)
        model = cfg.model.over(pretrained.model_section)
        if pretrained.kind == "hf":  # a source without its tokenizer is said before the config is compared with it
            check_tokenizer_files(pretrained.tokenizer_dir)
        check_weights_fit(model, pretrained)  # before the run directory is made or any data read
        return StartingPoint(replace(cfg, model=model), pretrained=pretrained)
    return StartingPoint(cfg)


def source_decides(cfg: RunConfig, pretrained: Pretrained) -> RunConfig:
    """`cfg` without what training.init_from's model decides in its place (same_run.decided_by_source), said in
    one line, so that config.yaml records what the run used."""
    cfg, replaced = decided_by_source(cfg)
    if replaced:
        log.warning("training.init_from %s decides in the config's place: %s", pretrained.source, "; ".join(replaced))
    return cfg


def adaptation_source(cfg: RunConfig, pretrained: Pretrained) -> Pretrained:
    """The decoder-only `pretrained` model as an adaptation's source: the encoder-decoder section it makes, with
    training.init_decoder_from's model as the decoder's source where the adaptation is unbalanced."""
    decoder = None
    if cfg.training.init_decoder_from:
        decoder = load_pretrained(cfg.training.init_decoder_from, "training.init_decoder_from ")
        if decoder.model_section.get("family") != "decoder_only":
            raise ConfigError(f"training.init_decoder_from's model ({decoder.source}) is not a decoder-only model")
    section = adapted_section(pretrained.model_section, decoder.model_section if decoder else None)
    return replace(pretrained, model_section=section, adapted=True, decoder=decoder)


def set_up(cfg: RunConfig, run: RunDir, resume: bool, accept_changes: bool, info: distributed.DistInfo) -> Training:
    """Tokenizer, data, model, optimizer and training state, new or as the latest checkpoint left them."""
    start = starting_point(cfg, run, resume, accept_changes)
    cfg, parts = start.cfg, start.parts
    saved = read_saved_state(parts["state"], start.checkpoint) if parts is not None else None
    kept = saved.train.threads if saved is not None else None
    processes = distributed.read_layout().local_world_size  # the processes sharing this machine's cores
    threads = choose_threads(cfg.training.threads, "training.threads", kept, processes)
    if threads is not None:
        torch.set_num_threads(threads)
    check_processes(cfg, info.world_size)  # what the loop would refuse, before anything is read, written or warned
    check_step_size(cfg)  # before any data is read
    check_objective_family(cfg)
    found_teacher = find_teacher(cfg, start.checkpoint)  # a bad teacher is refused before the run directory is made
    run.path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.training.seed)
    data = build_run_data(cfg, run.path, tokenizer_dir=start.tokenizer_dir)
    model = new_model(cfg, data, info.device, teacher_bytes(found_teacher[0]) if found_teacher else 0)
    teacher = load_teacher(cfg, *found_teacher, data.tokenizer, model.config, info.device) if found_teacher else None
    found_teacher = None  # the weights are in the teacher now
    generation = transcription_defaults(cfg, data.tokenizer, start.generation)  # before the weights are let go
    base = None
    if start.pretrained is not None:
        record = load_pretrained_weights(model, start.pretrained)
        if record is not None:  # what came from where, for the reader of the run
            write_atomic(run.path / ADAPTATION_FILE, json.dumps(record, indent=1) + "\n")
            log.info(adaptation_summary(record))
        if cfg.lora is not None:
            p = start.pretrained
            base = BasePointer(cfg.training.init_from, p.kind, source_path(p.source), weights_sha256(p.weights))
        start.pretrained = None  # the weights are in the model now
    state = TrainState()
    if parts is not None and cfg.lora is not None:  # the base's weights, the adapters, the checkpoint's over them
        load_adapted(model, cfg.adapter_config(), start.checkpoint, parts["model"])
        base = read_base(start.checkpoint)
    elif parts is not None:
        load_state(model, parts["model"], f"{start.checkpoint.model} does not fit the model this config builds")
    if parts is None or cfg.lora is None:
        apply_lora(model, cfg.lora, cfg.training.train_only)  # where the config asks for them
    if teacher is not None and cfg.training.distill.share_encoder:  # a resume's encoder: the teacher's still
        share_encoder(model, teacher)
    if saved is not None:
        state = saved.train
        data.train.load_state_dict(asdict(saved.data))
    state.threads = torch.get_num_threads()  # what a resume computes with again
    model.to(info.device)
    if cfg.training.activation_checkpointing:
        log.info(
            "activation checkpointing: %d blocks recompute their activations in backward", checkpoint_activations(model)
        )
    if parts is not None:
        check_rng_states(parts["rng"], start.checkpoint)
        _restore_rng(parts["rng"], info, start.checkpoint.rng)
    precision = resolve_precision(
        cfg.training.precision, info.device, cfg.training.distributed if info.enabled else None
    )
    scaler = grad_scaler(precision, info.device)
    if scaler is not None and parts is not None and saved.scaler is not None:
        scaler.load_state_dict(asdict(saved.scaler))
    if cfg.training.ema_decay and info.enabled and cfg.training.distributed == "fsdp":
        raise ConfigError("training.ema_decay keeps whole weights in every process; use DDP, not FSDP, to keep an EMA")
    ema = None
    if cfg.training.ema_decay:  # a resume's saved average where its checkpoint keeps one (load_checkpoint)
        saved_ema = parts.get("ema") if parts is not None else None
        ema = WeightAverage(model, cfg.training.ema_decay, saved_ema, start.checkpoint and start.checkpoint.ema)
    held = held_parameters(model, run, cfg.training.cross_attention_warmup)
    n_params, n_params_no_pos = count_parameters(model), count_parameters(model, exclude_positions=True)
    wrapped = distributed.wrap(model, info, cfg.training.distributed, precision)
    if cfg.training.compile and info.enabled:  # DDP / FSDP: the wrapped module, whose gradient buckets dynamo knows
        wrapped = torch.compile(wrapped)
    loss_of = step_loss  # forward and loss; compiled on one process, with static shapes where bucket_length keeps few
    if cfg.training.compile and not info.enabled:
        loss_of = torch.compile(step_loss, dynamic=False if cfg.training.bucket_length else None)
    fused = info.device.type == "cuda" and not (info.enabled and cfg.training.distributed == "fsdp")
    optimizer = build_optimizer(wrapped, cfg, fused=fused)
    if parts is not None:
        _load_optimizer(model, wrapped, optimizer, parts["optimizer"], start.checkpoint.optimizer, held)
    if info.is_main:
        save_config(cfg, run.config)
    metrics = MetricsLog(run.metrics, state.step if parts else None, info.is_main, tensorboard_dir(cfg, run))
    if start.changes:
        metrics.write({"kind": "config_change", "step": state.step, "changes": start.changes})
        log.warning("resumed at step %d with config changes: %s", state.step, ", ".join(start.changes))
    log.info("model %s: %s parameters, %s on %s", model.config.family, f"{n_params:,}", precision, info.device)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trainable < n_params:
        log.info("training %s of them (LoRA adapters or training.train_only)", f"{trainable:,}")
    return Training(
        cfg,
        run,
        info,
        data,
        model,
        wrapped,
        optimizer,
        scaler,
        precision,
        state,
        metrics,
        n_params,
        n_params_no_pos,
        generation,
        asdict(base) if base is not None else None,
        ema,
        teacher,
        held,
        loss_of,
    )


def held_parameters(model: nn.Module, run: RunDir, warmup: int) -> list[nn.Parameter]:
    """The parameters training.cross_attention_warmup holds still: every one the run's adaptation copied."""
    record_file = run.path / ADAPTATION_FILE
    record = json.loads(record_file.read_text()) if warmup and record_file.is_file() else None
    names = warmup_frozen(record, warmup)
    named = dict(model.named_parameters(remove_duplicate=False))
    return list({id(named[name]): named[name] for name in names if name in named}.values())


def transcription_defaults(cfg: RunConfig, tokenizer, generation: dict) -> dict:
    """A run's generation defaults, which a transcription run decodes with its training's prompt by: Whisper's
    rules (a Whisper directory's, which make the prompt) in its language and task, or the prompt itself."""
    o = cfg.objective
    if o.kind != "transcribe":
        return generation
    if "whisper" in generation:
        if o.language is not None and not generation["whisper"].get("is_multilingual", True):
            raise ConfigError(
                f"objective.language {o.language}: training.init_from's Whisper is English-only (is_multilingual "
                "false), whose prompt names no language; drop objective.language"
            )
        return generation | ({"language": o.language, "task": o.task} if o.language is not None else {})
    start, prompt = transcription_prompt(tokenizer, o.language, o.task)
    return generation | ({"decoder_prompt": [start, *prompt]} if prompt else {})


def check_objective_family(cfg: RunConfig) -> None:
    """ConfigError where the objective's batches do not fit the model: causal_lm and prefix_lm make one token
    stream, which only a causal LM reads (an encoder-decoder's PrefixLM is UL2's S-denoiser)."""
    family = cfg.model.family
    kinds = {cfg.objective.kind} | {member_objective(cfg, i).kind for i in range(len(cfg.data.mixture))}
    hears = family in SPEECH_FAMILIES
    if hears != ("transcribe" in kinds) or (hears and len(kinds) > 1):
        wrong = "transcribe" if not hears else sorted(kinds - {"transcribe"})[0]
        raise ConfigError(
            f"objective.kind {wrong} does not fit the model's family {family}: objective transcribe makes log-mel "
            f"features, which the speech families ({', '.join(SPEECH_FAMILIES)}) read, and they read nothing else"
        )
    stream = sorted(kinds & set(DECODER_ONLY_OBJECTIVES))
    if stream and family not in CAUSAL_LMS:
        hint = "; for PrefixLM use objective.kind ul2 with ul2_probabilities [0, 0, 1]" if "prefix_lm" in stream else ""
        raise ConfigError(
            f"objective.kind {stream[0]} makes one token stream for a causal LM, but the model's family is {family}{hint}"
        )


def new_model(cfg: RunConfig, data: RunData, device: torch.device, teacher: int = 0) -> nn.Module:
    """The model the config's model section describes, for the run's tokenizer; refused before it is
    built where it or a training step (beside a distillation teacher of `teacher` bytes) cannot fit the device."""
    tok = data.tokenizer
    start = tok.decoder_start_id
    if cfg.objective.kind == "transcribe":  # Whisper's decoder starts from <|startoftranscript|> where it has one
        start = transcription_prompt(tok, cfg.objective.language, cfg.objective.task)[0]
    model_cfg = cfg.model.build(tok.vocab_size, tok.pad_id, tok.eos_id, start)
    check_row_lengths(cfg, model_cfg)
    check_activations_fit(cfg, model_cfg, device, check_model_fits(model_cfg, device), teacher)
    try:
        return build_model(model_cfg)
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        raise ConfigError(f"building the model ran out of memory ({str(error).splitlines()[0][:120]})") from None


def check_row_lengths(cfg: RunConfig, model_cfg: ModelConfig) -> None:
    """ConfigError where the rows an objective makes (each mixture member's) are longer than the model reads:
    a learned or sinusoidal table's rows, a causal LM's context; before the model is built."""
    members = [member_objective(cfg, i) for i in range(len(cfg.data.mixture))]
    for i, o in enumerate(members or [cfg.objective]):
        options = objective_options(o)
        lengths = "max_source_len {max_source_len}, max_target_len {max_target_len}" if o.kind == "seq2seq" else ""
        lengths = (lengths or "seq_len {seq_len}").format(**options)
        member = f"data.mixture[{i}]'s " if members else ""
        longest = longest_rows(o.kind, **options)
        if cfg.training.bucket_length:  # rows padded up to a multiple of it
            step = cfg.training.bucket_length
            longest = tuple(-(-n // step) * step for n in longest)
            lengths += f", padded to a multiple of training.bucket_length {step}"
        check_position_limits(model_cfg, *longest, f"{member}objective {o.kind} ({lengths})")


def tensorboard_dir(cfg: RunConfig, run: RunDir) -> Path | None:
    """Where TensorBoard events go: output.tensorboard, by default on when the package is installed."""
    board = cfg.output.tensorboard if cfg.output.tensorboard is not None else tensorboard_available()
    if board and not tensorboard_available():
        raise ConfigError(
            "output.tensorboard is true but the tensorboard package is missing: pip install 'encdec[tensorboard]'"
        )
    return run.tensorboard if board else None


def _restore_rng(saved: dict, info: distributed.DistInfo, path: Path) -> None:
    """This rank's RNG states from a checkpoint's `path` (older checkpoints hold only the CPU state, as "torch")."""
    states = {"cpu": saved.get(f"cpu_rank{info.rank}", saved["torch"])}
    if f"cuda_rank{info.rank}" in saved:
        states["cuda"] = saved[f"cuda_rank{info.rank}"]
    try:
        restored = set_rng_states(states, info.device)
    except RuntimeError as error:  # a GPU generator refusing the bytes it is given
        raise CheckpointError(
            f"{path}: rank {info.rank}'s random state cannot be restored ({str(error).splitlines()[0][:100]}); "
            "the checkpoint is damaged"
        ) from None
    if not restored:
        log.warning(
            "the checkpoint holds no GPU random state for rank %d: dropout will not repeat the "
            "uninterrupted run's masks",
            info.rank,
        )


def _load_optimizer(
    model: nn.Module,
    wrapped: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: object,
    path: Path,
    held: list[nn.Parameter] = (),
) -> None:
    """The saved optimizer state into `optimizer`; state of another model or optimizer is one sentence, and so
    is a parameter's state that is not what the optimizer's own step keeps (`state_layout`: a moment missing,
    which loading would silently start again from zero, or one of another shape). The `held` parameters
    (training.cross_attention_warmup's) may have none yet: they have not been stepped."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    foreign = CheckpointError(f"{path} does not hold the state of this model's {type(optimizer).__name__}")
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("state"), dict)
        or not isinstance(state.get("param_groups"), list)
    ):
        raise foreign
    group_of = {id(p): i for i, group in enumerate(optimizer.param_groups) for p in group["params"]}
    params = model.state_dict(keep_vars=True)  # the names checkpoints use (no wrapper's), a tied weight under each
    layouts = {}
    for name, saved in state["state"].items():
        p = params.get(name)
        if not isinstance(p, nn.Parameter) or id(p) not in group_of or not isinstance(saved, dict):
            raise foreign
        key = (group_of[id(p)], tuple(p.shape))
        if key not in layouts:
            layouts[key] = state_layout(optimizer, optimizer.param_groups[key[0]], key[1])
        found = {k: tuple(v.shape) for k, v in saved.items() if torch.is_tensor(v)}
        if layouts[key] is not None and found != layouts[key]:
            raise foreign
    stepped = {id(params[name]) for name in state["state"]}
    unstepped = {id(p) for p in model.parameters() if p.requires_grad} - stepped
    if unstepped - {id(p) for p in held}:  # only the held may lack state
        raise foreign
    options = StateDictOptions(full_state_dict=True, strict=not unstepped)
    try:
        set_optimizer_state_dict(wrapped, optimizer, state, options=options)
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError, AssertionError, AttributeError):
        raise foreign from None
    for p in model.parameters():  # torch fills missing state by a zero step (step 1); unstepped, they have none
        if id(p) in unstepped:
            optimizer.state.pop(p, None)
