"""training.ema_decay: an exponential moving average of the weights, kept in float32 beside the live ones.

After each optimizer step, ema = decay * ema + (1 - decay) * live (Polyak averaging as fairseq's and
timm's EMA keep it). Every checkpoint saves it as ema.safetensors and a resume reads it back as saved,
so a resumed run's EMA is bitwise that of an uninterrupted one (a checkpoint whose config keeps an EMA
must hold it, finite, runs.checkpoint.load_checkpoint, and hold the model's weights' names and shapes); `encdec average RUN --ema` writes it
as a checkpoint of its own (ema_step_XXXXXXXX) to evaluate, generate, export or from_pretrained. Under
DDP every process holds the same weights, hence the same EMA; FSDP's sharded weights are refused. With
training.ema_eval, each evaluation (and so `best`) judges the average, swapped into the model and out again.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from encdec.errors import CheckpointError


class WeightAverage:
    """The moving average of a model's floating-point weights (its state dict's names, float32, on its device)."""

    def __init__(
        self, model: nn.Module, decay: float, saved: dict[str, torch.Tensor] | None = None, where: Path | None = None
    ):
        """A resume passes the average its checkpoint saved (`saved`, read from `where`): exactly the model's
        floating-point weights, float32 and of their shapes, else one sentence. Without it (a new run, or
        ema_decay turned on at a resume) the average starts from the weights as they stand."""
        self.decay = decay
        live = {name: t for name, t in model.state_dict().items() if t.is_floating_point()}
        if saved is None:
            self.shadow = {name: t.detach().float().clone() for name, t in live.items()}
            return
        missing, extra = sorted(live.keys() - saved.keys()), sorted(saved.keys() - live.keys())
        if missing or extra:
            detail = f"lacks {missing[0]}" if missing else f"holds {extra[0]}, which is no weight of this model"
            raise CheckpointError(f"{where} does not hold this model's moving average (it {detail})")
        for name, t in live.items():
            if saved[name].shape != t.shape or saved[name].dtype != torch.float32:
                raise CheckpointError(
                    f"{where}: {name} is a {tuple(saved[name].shape)} {saved[name].dtype} tensor, not the "
                    f"{tuple(t.shape)} torch.float32 average of this model's weight"
                )
        self.shadow = {name: saved[name].to(t.device, torch.float32) for name, t in live.items()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """ema = decay * ema + (1 - decay) * live, for every floating-point weight."""
        for name, tensor in model.state_dict().items():
            if name in self.shadow:
                self.shadow[name].mul_(self.decay).add_(tensor.float(), alpha=1 - self.decay)

    @contextlib.contextmanager
    def swapped_in(self, model: nn.Module) -> Iterator[None]:
        """Inside the block the model holds the average (cast to each weight's dtype); after it, its live
        weights again, bit for bit (training.ema_eval: evaluation and `best` judge the average)."""
        state = model.state_dict()
        live = {name: state[name].detach().clone() for name in self.shadow}
        with torch.no_grad():
            for name, average in self.shadow.items():
                state[name].copy_(average)
        try:
            yield
        finally:
            with torch.no_grad():
                for name, weights in live.items():
                    state[name].copy_(weights)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: t.detach().cpu() for name, t in self.shadow.items()}
