"""Whether a model fits before it is built, and one sentence when a step runs out of memory.

A model section with d_model 10^6 or a batch of 10^5 rows should not end in an
allocator's traceback or the kernel's OOM killer: the parameters are estimated from
the config (from above: every matrix counted as if gated, untied and in every
expert), training's share (weights, gradients and AdamW's two moments: 16 bytes a
parameter) is compared with what the device has free, and an allocation failure
inside a step becomes a ConfigError naming the sizes.
"""

import torch

from encdec.errors import ConfigError
from encdec.models import ModelConfig
from encdec.runs.config import RunConfig

TRAINING_BYTES_PER_PARAMETER = 16  # fp32 weight, gradient, AdamW's exp_avg and exp_avg_sq


def estimated_parameters(cfg: ModelConfig) -> int:
    """An upper estimate of the parameter count of `cfg`'s model, without building it.

    (Building on the meta device would count exactly, but its first weight init costs
    seconds of torch's lazy set-up at every training start.)"""
    d, inner = cfg.d_model, cfg.n_heads * cfg.head_dim
    attention = 4 * d * inner
    ffn = 3 * d * cfg.d_ff * cfg.n_experts
    layers = cfg.n_encoder_layers * (attention + ffn) + cfg.decoder_layers * (2 * attention + ffn)
    return 2 * cfg.vocab_size * d + cfg.max_positions * d + layers


def free_bytes(device: torch.device) -> int | None:
    """Memory free for this process on `device` (None where it cannot be told)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_model_fits(cfg: ModelConfig, device: torch.device) -> int:
    """The estimated parameter count; ConfigError if training them cannot fit in the device's free memory."""
    n = estimated_parameters(cfg)
    need, free = n * TRAINING_BYTES_PER_PARAMETER, free_bytes(device)
    if free is not None and need > free:
        raise ConfigError(
            f"the model has about {n:,} parameters (d_model {cfg.d_model}, d_ff {cfg.d_ff}, vocabulary "
            f"{cfg.vocab_size:,}); training them needs {gib(need)} but {device} has {gib(free)} free"
        )
    return n


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


def gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB"
