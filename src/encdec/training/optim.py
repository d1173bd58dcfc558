"""The optimizer (AdamW or Adafactor) over decay and no-decay groups, and the learning-rate schedules.

Weight decay applies to parameters of 2 or more dimensions (matrices, embeddings),
not to biases and norm gains, as nanoGPT and yif-AI do. Adafactor (Shazeer and Stern
2018) is T5's optimizer: second moments factored into row and column statistics (memory
O(n + m) per n x m matrix, no first moment), a relative step size min(lr, 1/sqrt(t))
scaled by the parameter's RMS, and updates clipped to RMS 1 (torch.optim.Adafactor).
With `schedule.kind: constant` and lr 1e-2 that is T5's relative-step schedule; with
lr 1e-3, T5's constant fine-tuning rate.
"""

import math

import torch
from torch import nn

from encdec.training.config import RunConfig


def build_optimizer(model: nn.Module, cfg: RunConfig, fused: bool = False) -> torch.optim.Optimizer:
    """`optimizer.kind` over the decay and no-decay groups; `fused` runs AdamW as one CUDA kernel."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.optimizer.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    o = cfg.optimizer
    if o.kind == "adafactor":  # eps (None, 1e-3) and d = 1 (the RMS clip) are T5's; betas do not apply
        return torch.optim.Adafactor(groups, lr=o.lr)
    return torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas), eps=o.eps, fused=fused or None)


def lr_at(step: int, cfg: RunConfig) -> float:
    """The learning rate of optimizer step `step` (0-based).

    constant:     lr, after a linear warmup if one is set
    linear:       linear warmup to lr, then linear decay to 0 at the last step (ROT5;
                  Hugging Face's get_linear_schedule_with_warmup)
    cosine:       nanoGPT's get_lr evaluated at it = step + 1: lr * it / warmup while
                  it < warmup, then cosine from lr to min_lr over decay_steps, min_lr after
    inverse_sqrt: lr * min(it / warmup, sqrt(warmup / it)), it = step + 1 (Vaswani et al.
                  2017, 5.3, with lr = d_model^-0.5 * warmup^-0.5 giving their formula)
    """
    lr, warmup, total = cfg.optimizer.lr, cfg.warmup_steps, cfg.training.steps
    kind = cfg.schedule.kind
    if kind == "constant":
        return lr * min(1.0, (step + 1) / warmup) if warmup else lr
    if kind == "linear":
        if step < warmup:
            return lr * step / warmup
        return lr * max(0.0, (total - step) / max(1, total - warmup))
    it = step + 1
    if kind == "inverse_sqrt":
        warmup = max(warmup, 1)
        return lr * min(it / warmup, math.sqrt(warmup / it))
    min_lr = cfg.schedule.min_lr
    decay = cfg.schedule.decay_steps or total
    if it < warmup:
        return lr * it / warmup
    if it > decay:
        return min_lr
    ratio = (it - warmup) / max(1, decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)
