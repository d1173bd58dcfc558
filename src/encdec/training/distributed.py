"""One process or many under torchrun: DDP or FSDP, gloo on CPU, nccl on GPU.

Every process draws the same global batch and trains on its own slice of rows,
so a run on W processes sees exactly the batches of a one-process run.
"""

import os
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from encdec.errors import ConfigError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto") -> DistInfo:
    """Join the torchrun process group when WORLD_SIZE > 1; pick the device."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training.device is cuda but no GPU is available")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return DistInfo(device=torch.device(device))
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    target = torch.device("cuda", local_rank) if device == "cuda" else torch.device("cpu")
    return DistInfo(rank, world_size, local_rank, target)


def teardown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, info: DistInfo, kind: str) -> nn.Module:
    """DDP or FSDP (per-block sharding) when distributed; the model itself otherwise."""
    if not info.enabled:
        return model
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [info.local_rank] if info.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)
    from torch.distributed.fsdp import fully_shard

    for module in model.modules():
        if module.__class__.__name__ in ("EncoderBlock", "DecoderBlock"):
            fully_shard(module)
    return fully_shard(model)


def no_sync(model: nn.Module, last_micro_step: bool):
    """Skip the gradient all-reduce on all but the last micro-step of an accumulation."""
    if last_micro_step:
        return nullcontext()
    if hasattr(model, "no_sync"):  # DDP
        return model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(False)
        return _ReenableSync(model)
    return nullcontext()


class _ReenableSync:
    def __init__(self, model):
        self.model = model

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.model.set_requires_gradient_sync(True)


def all_reduce_sum(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def rows_for_rank(n_rows: int, info: DistInfo) -> slice:
    if n_rows % info.world_size:
        raise ConfigError(f"training.batch_size ({n_rows}) must be divisible by the {info.world_size} processes")
    per = n_rows // info.world_size
    return slice(info.rank * per, (info.rank + 1) * per)
