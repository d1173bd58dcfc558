"""One process or many under torchrun: DDP or FSDP, gloo on CPU, nccl on GPU (one GPU per process).

Every process draws the same global batch and trains on its own slice of rows,
so a run on W processes sees exactly the batches of a one-process run. During
gradient accumulation only the last micro-batch's backward synchronises gradients.
"""

import os
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from encdec.errors import ConfigError
from encdec.schema import short

MAX_PROCESSES = 1 << 20  # a WORLD_SIZE above this is a typo, not a cluster
LAUNCH_HINT = (
    "start the processes with torchrun or encdec train --nproc-per-node N, or unset WORLD_SIZE for one process"
)


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


@dataclass(frozen=True)
class Layout:
    """The processes torchrun's environment describes: this one's rank of `world_size`, and on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1


def read_layout(environ: Mapping[str, str] | None = None) -> Layout:
    """The layout in torchrun's variables (WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE), checked before any
    process group starts: one process where WORLD_SIZE is unset, else one sentence (ConfigError) naming the
    variable that is missing or out of range, where joining the group would raise or wait forever."""
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" not in env:
        return Layout()
    world_size = _env_int(env, "WORLD_SIZE", 1, MAX_PROCESSES)
    if world_size > 1 and "RANK" not in env:
        raise ConfigError(f"WORLD_SIZE is {world_size} but RANK is not set; {LAUNCH_HINT}")
    rank = _env_int(env, "RANK", 0, world_size - 1, default=0)
    local_world_size = _env_int(env, "LOCAL_WORLD_SIZE", 1, world_size, default=world_size)
    local_rank = _env_int(env, "LOCAL_RANK", 0, local_world_size - 1, default=0)
    return Layout(rank, world_size, local_rank, local_world_size)


def _env_int(env: Mapping[str, str], name: str, low: int, high: int, default: int | None = None) -> int:
    """The environment variable `name` as an integer from `low` to `high`, else one sentence."""
    text = env.get(name)
    if text is None and default is not None:
        return default
    try:
        value = int(text.strip())
    except (AttributeError, ValueError):
        raise ConfigError(f"{name} must be an integer, got {short(text, 40)}; {LAUNCH_HINT}") from None
    if not low <= value <= high:
        bounds = f"from {low} to {high}" if high < MAX_PROCESSES else f"at least {low}"
        relation = {
            "RANK": " (below WORLD_SIZE)",
            "LOCAL_RANK": " (below LOCAL_WORLD_SIZE)",
            "LOCAL_WORLD_SIZE": " (at most WORLD_SIZE)",
        }.get(name, "")
        raise ConfigError(f"{name} must be {bounds}{relation}, got {value}; {LAUNCH_HINT}")
    return value


def check_rendezvous(environ: Mapping[str, str] | None = None) -> None:
    """MASTER_ADDR and MASTER_PORT, where the processes meet: present and a port number, else one sentence
    instead of torch's error from inside init_process_group."""
    env = os.environ if environ is None else environ
    address = env.get("MASTER_ADDR", "").strip()
    if not address:
        raise ConfigError(f"WORLD_SIZE is set but MASTER_ADDR is not; {LAUNCH_HINT}")
    if "MASTER_PORT" not in env:
        raise ConfigError(f"WORLD_SIZE is set but MASTER_PORT is not; {LAUNCH_HINT}")
    _env_int(env, "MASTER_PORT", 1, 65535)


def resolve_device(device: str) -> str:
    """ "auto" made cuda or cpu; cuda refused in one sentence where torch sees no GPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training.device is cuda but no GPU is available")
    return device


def check_devices(layout: Layout, device: str) -> None:
    """One GPU per process on each machine: more processes than GPUs are refused before any starts."""
    if device != "cuda" or layout.world_size == 1:
        return
    gpus = torch.cuda.device_count()
    if layout.local_world_size > gpus:
        raise ConfigError(
            f"torchrun started {layout.local_world_size} processes on this machine but it has {gpus} GPU(s); "
            f"use --nproc_per_node {gpus} or fewer, or training.device=cpu"
        )


def setup(device: str = "auto") -> DistInfo:
    """Join the torchrun process group when WORLD_SIZE > 1; pick the device. The environment and the
    devices are checked first, so a misuse is one sentence, not a traceback or a wait for absent peers."""
    layout = read_layout()
    device = resolve_device(device)
    if layout.world_size == 1:
        return DistInfo(device=torch.device(device))
    check_devices(layout, device)
    check_rendezvous()
    if device == "cuda":
        torch.cuda.set_device(layout.local_rank)
    if not dist.is_initialized():
        with interrupts_end_the_wait():
            dist.init_process_group("nccl" if device == "cuda" else "gloo")
    target = torch.device("cuda", layout.local_rank) if device == "cuda" else torch.device("cpu")
    return DistInfo(layout.rank, layout.world_size, layout.local_rank, target)


@contextmanager
def interrupts_end_the_wait() -> Iterator[None]:
    """While the processes meet (nothing written yet), Ctrl-C ends this one at once: the wait for a process that
    is gone happens inside torch's C++ code, which runs no Python signal handler until the meeting times out."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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


def all_reduce_max(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value


def rows_for_rank(n_rows: int, info: DistInfo) -> slice:
    if n_rows % info.world_size:
        raise ConfigError(f"training.batch_size ({n_rows}) must be divisible by the {info.world_size} processes")
    per = n_rows // info.world_size
    return slice(info.rank * per, (info.rank + 1) * per)
