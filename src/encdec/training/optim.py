"""The optimizer (AdamW or Adafactor) over decay and no-decay groups, and the learning-rate schedules.

Weight decay applies to parameters of 2 or more dimensions (matrices, embeddings),
not to biases and norm gains, as nanoGPT and yif-AI do. Adafactor (Shazeer and Stern
2018) is T5's optimizer: second moments factored into row and column statistics (memory
O(n + m) per n x m matrix, no first moment), a relative step size min(lr, 1/sqrt(t))
scaled by the parameter's RMS, and updates clipped to RMS 1 (torch.optim.Adafactor).
With `schedule.kind: constant` and lr 1e-2 that is T5's relative-step schedule; with
lr 1e-3, T5's constant fine-tuning rate. `adamw_scale` is nanoT5's AdamW: each
parameter's step scaled by its RMS (at least 1e-3), as Adafactor scales its steps, which
lets T5 pretrain with AdamW at lr 2e-2 (Nawrot 2023).

What an optimizer keeps for each parameter is its own class's to say: `state_layout` asks it, with one step
on a small stand-in, so a resume can check a saved state against it whatever the optimizer.
"""

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from encdec.training.run_config import RunConfig

PROBE_SIZES = (2, 3, 5, 7, 11, 13, 17, 19)  # a stand-in's sizes: distinct, and none a 1 its state could hold


def state_layout(optimizer: torch.optim.Optimizer, group: dict, shape: tuple[int, ...]) -> dict[str, tuple] | None:
    """{name: shape} of the tensors one step of `optimizer`'s class, with `group`'s settings, keeps for a
    parameter of `shape` (AdamW's exp_avg, Adafactor's row_var (n, 1), ...); None past 8 dimensions. Worked
    out on a stand-in of distinct prime sizes on the CPU, each size mapped back to the parameter's own, so
    nothing of the parameter's size is allocated."""
    if len(shape) > len(PROBE_SIZES):
        return None
    small = PROBE_SIZES[: len(shape)]
    standin = torch.zeros(small, requires_grad=True)
    standin.grad = torch.zeros_like(standin)
    settings = {key: value for key, value in group.items() if key != "params"}
    settings |= {key: False for key in ("fused", "capturable", "differentiable") if settings.get(key)}
    probe = type(optimizer)([{**settings, "params": [standin]}])
    probe.step()
    back = dict(zip(small, shape, strict=True))
    state = probe.state[standin]
    return {
        key: tuple(back.get(size, size) for size in value.shape)
        for key, value in state.items()
        if torch.is_tensor(value)
    }


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
    if o.kind == "adamw_scale":
        return AdamWScale(groups, lr=o.lr, betas=tuple(o.betas), eps=o.eps)
    return torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas), eps=o.eps, fused=fused or None)


class AdamWScale(torch.optim.Optimizer):
    """AdamW whose step for each parameter is multiplied by max(1e-3, RMS(parameter)) (nanoT5).

    As Hugging Face's former AdamW, which nanoT5 modified: p -= lr * sqrt(1 - b2^t) / (1 - b1^t) *
    max(1e-3, rms(p)) * m / (sqrt(v) + eps), then the decoupled decay p *= 1 - lr * weight_decay.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        for group in self.param_groups:
            (beta1, beta2), lr = group["betas"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                step = state["step"]
                state["exp_avg"].lerp_(p.grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denominator = state["exp_avg_sq"].sqrt().add_(group["eps"])
                correction = (1 - beta2**step).sqrt() / (1 - beta1**step)  # a device scalar: no host sync
                scale = p.pow(2).mean().sqrt().clamp(min=1e-3)  # the parameter's RMS, before its update
                p.sub_(lr * correction * scale * state["exp_avg"] / denominator)
                if group["weight_decay"]:
                    p.mul_(1 - lr * group["weight_decay"])
        return None


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
