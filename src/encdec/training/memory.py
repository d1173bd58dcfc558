"""Whether a training fits before it starts, and one sentence when a step runs out of memory.

A model section with d_model 10^6 or a batch of 10^5 rows should not end in an
allocator's traceback or the kernel's OOM killer: before the model is built, its
parameters are estimated from the config (models/weights_memory.py), and training's share
(weights, gradients and AdamW's two moments: 16 bytes a parameter) plus a floor of
one step's activations is compared with what the device has free. The tokens one
optimizer step gathers (batch_size x grad_accum x the sequence length) are bounded
too: those batches are all held on the host before the step. An allocation failure
inside a step becomes a ConfigError naming the sizes.
"""

import torch

from encdec.audio.features import N_FRAMES
from encdec.errors import ConfigError
from encdec.models import ModelConfig
from encdec.models.weights_memory import check_weights_fit
from encdec.sizing import free_bytes, gib
from encdec.training.run_config import RunConfig

TRAINING_BYTES_PER_PARAMETER = 16  # fp32 weight, gradient, AdamW's exp_avg and exp_avg_sq
MAX_TOKENS_PER_STEP = 1 << 27  # 134M: 8 times the largest published steps (Llama 3's 16M tokens)
HOST_BYTES_PER_TOKEN = 40  # a held batch's token ids, labels and masks (int64 and bool) per position
ACTIVATION_FLOOR_BYTES = 8  # per position, layer and model dimension: two fp32 tensors a block keeps at least


def check_model_fits(cfg: ModelConfig, device: torch.device) -> int:
    """The estimated parameter count; ConfigError if the model cannot be built in the CPU's free memory
    (where it is made) or trained in `device`'s."""
    check_weights_fit(cfg, "cpu")
    return check_weights_fit(
        cfg, device, TRAINING_BYTES_PER_PARAMETER, "training them (weights, gradients, AdamW) needs"
    )


def row_lengths(cfg: RunConfig) -> tuple[int, int]:
    """(source, target) positions of one training row: a seq2seq pair's longest, a recording's encoder positions
    and its transcript's longest, else a chunk of seq_len
    split between them (about so: UL2's inputs and targets hold the chunk and a few sentinels)."""
    o = cfg.objective
    if o.kind == "seq2seq":
        return o.max_source_len, o.max_target_len
    if o.kind == "transcribe":  # the encoder's positions: 30 s of log-mel frames after its stride-2 stem
        return N_FRAMES // 2, o.max_target_len
    return o.seq_len // 2, o.seq_len - o.seq_len // 2


def check_step_size(cfg: RunConfig) -> None:
    """ConfigError where one optimizer step gathers more tokens than MAX_TOKENS_PER_STEP or more batches than
    the host's free memory holds (all of them are taken before the step); before any data is read."""
    t, positions = cfg.training, sum(row_lengths(cfg))
    tokens = t.batch_size * t.grad_accum * positions
    gathered = (
        f"one optimizer step would gather {tokens:,} tokens (training.batch_size {t.batch_size:,} x "
        f"training.grad_accum {t.grad_accum:,} x {positions:,} positions a row)"
    )
    if tokens > MAX_TOKENS_PER_STEP:
        raise ConfigError(f"{gathered}; encdec takes at most {MAX_TOKENS_PER_STEP:,}")
    held, free = tokens * HOST_BYTES_PER_TOKEN, free_bytes("cpu")
    if free is not None and held > free:
        raise ConfigError(f"{gathered}, which need ~{gib(held)} of host memory; it has {gib(free)} free")


def check_activations_fit(
    cfg: RunConfig, model_cfg: ModelConfig, device: torch.device, parameters: int, teacher_bytes: int = 0
) -> None:
    """ConfigError where a floor of one step's memory (training's share of the weights, the activations of
    batch_size rows through every layer, and their logits; a distillation teacher's weights, `teacher_bytes`,
    and its logits) exceeds what `device` has free."""
    source, target = row_lengths(cfg)
    rows, layers = cfg.training.batch_size, model_cfg.n_encoder_layers
    if model_cfg.family != "decoder_only":  # its one stack is n_encoder_layers deep
        layers += model_cfg.decoder_layers
    activations = rows * (source + target) * layers * model_cfg.d_model * ACTIVATION_FLOOR_BYTES
    logits = rows * target * model_cfg.vocab_size * 4 * (2 if teacher_bytes else 1)  # the teacher's too
    need = parameters * TRAINING_BYTES_PER_PARAMETER + teacher_bytes + activations + logits
    free = free_bytes(device)
    if free is not None and need > free:
        teacher = f", {gib(teacher_bytes)} the teacher's weights" if teacher_bytes else ""
        raise ConfigError(
            f"a training step of {rows:,} rows of {source:,} + {target:,} positions needs at least ~{gib(need)} "
            f"on {device} ({gib(activations + logits)} of it activations and logits{teacher}), which has "
            f"{gib(free)} free; lower training.batch_size (training.grad_accum keeps the global batch) or the "
            "objective's lengths"
        )


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def step_out_of_memory(cfg: RunConfig, device: torch.device) -> ConfigError:
    """The sentence for a step that ran out of memory."""
    o = cfg.objective
    lengths = f"{o.max_source_len} + {o.max_target_len}" if o.kind == "seq2seq" else f"{o.seq_len}"
    return ConfigError(
        f"a training step ran out of memory on {device} with batches of {cfg.training.batch_size} "
        f"rows of up to {lengths} tokens; lower training.batch_size (training.grad_accum keeps the "
        "global batch) or the objective's lengths"
    )
