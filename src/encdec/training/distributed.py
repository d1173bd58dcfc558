"""One process or many under torchrun: DDP or FSDP, gloo on CPU, nccl on GPU (one GPU per process).

Every process draws the same global batch and trains on its own slice of rows,
so a run on W processes sees exactly the batches of a one-process run. During
gradient accumulation only the last micro-batch's backward synchronises gradients.
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
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        gpus = torch.cuda.device_count()
        if local_world > gpus:
            raise ConfigError(
                f"torchrun started {local_world} processes on this machine but it has {gpus} GPU(s); "
                f"use --nproc_per_node {gpus} or fewer, or training.device=cpu"
            )
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    target = torch.device("cuda", local_rank) if device == "cuda" else torch.device("cpu")
    return DistInfo(rank, world_size, local_rank, target)


def barrier(info: DistInfo) -> None:
    """Wait until every process gets here (nothing when not distributed)."""
    if info.enabled:
        dist.barrier()


def teardown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, info: DistInfo, kind: str, precision: str = "fp32") -> nn.Module:
    """DDP or FSDP (per-block sharding) when distributed; the model itself otherwise.

    FSDP in bf16 gathers parameters in bf16 for compute and reduces gradients in fp32
    (MixedPrecisionPolicy); the sharded master weights stay fp32.
    """
    if not info.enabled:
        return model
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [info.local_rank] if info.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if precision == "bf16"
        else MixedPrecisionPolicy()
    )
    for module in model.modules():
        if module.__class__.__name__ in ("EncoderBlock", "DecoderBlock"):
            fully_shard(module, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def gradient_sync(model: nn.Module, enabled: bool):
    """Around a micro-batch's forward AND backward: synchronise gradients only when `enabled` (the last one)."""
    if hasattr(model, "no_sync"):  # DDP decides in forward, reduces in backward
        return nullcontext() if enabled else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2 reads the flag in backward
        model.set_requires_gradient_sync(enabled)
    return nullcontext()


def gather_objects(value: object, info: DistInfo) -> list:
    """Every process's `value`, in rank order (just [value] in one process)."""
    if not info.enabled:
        return [value]
    values = [None] * info.world_size
    dist.all_gather_object(values, value)
    return values


def all_reduce_sum(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def rows_for_rank(n_rows: int, info: DistInfo) -> slice:
    if n_rows % info.world_size:
        raise ConfigError(f"training.batch_size ({n_rows}) must be divisible by the {info.world_size} processes")
    per = n_rows // info.world_size
    return slice(info.rank * per, (info.rank + 1) * per)
