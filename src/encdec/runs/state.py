"""What a checkpoint's state.json and rng.safetensors hold, declared, and read back only as declared.

    state.json   {"train": TrainState, "data": the objective's position, "scaler": fp16's loss scale}
    rng          torch's CPU generator state of every rank (and CUDA's on a GPU)

A resume trusts nothing it reads: a step of 10^12, a step that is not its directory's, a data
position without its keys, a loss scale of the wrong shape or an RNG state of the wrong size are
one sentence naming the file, not a traceback or a run that silently starts somewhere else.
"""

from dataclasses import dataclass
from typing import Annotated

import torch

from encdec.data.objectives.objective import DataPosition
from encdec.errors import CheckpointError, ConfigError
from encdec.runs.run_dir import CheckpointDir
from encdec.schema import Count, Positive, Range, read

MAX_STEPS = 10**9  # the most steps a run config asks for, and so a checkpoint's step
MAX_THREADS = 4096  # the most threads a run config asks for (training.threads), and so a checkpoint's


@dataclass
class TrainState:
    """Run-time state saved in checkpoints (never in the config)."""

    step: Annotated[int, Range(0, MAX_STEPS)] = 0
    tokens: Count = 0
    elapsed: Annotated[float, Range(0)] = 0.0  # seconds of training, summed over resumes
    best_val: float | None = None  # the best score of output.best_by (val_loss, or minus the metric)
    evals_since_best: Count = 0  # evaluations since best_val improved (early stopping)
    # the torch CPU threads it computes with, chosen at its start (sizing.choose_threads) and kept on resume, as
    # sums split among threads round differently; None in checkpoints from before it was kept
    threads: Annotated[int, Range(1, MAX_THREADS)] | None = None


@dataclass
class LossScale:
    """torch.amp.GradScaler's state_dict (fp16 runs)."""

    scale: Annotated[float, Range(0, above=True)]
    growth_factor: Annotated[float, Range(1, above=True)]
    backoff_factor: Annotated[float, Range(0, 1, above=True, below=True)]
    growth_interval: Positive
    _growth_tracker: Count


@dataclass
class SavedState:
    train: TrainState
    data: DataPosition
    scaler: LossScale | None = None


def read_saved_state(values: object, checkpoint: CheckpointDir) -> SavedState:
    """state.json's content as declared, its step that of its directory; else CheckpointError."""
    try:
        state = read(SavedState, values, "")
    except ConfigError as error:
        raise CheckpointError(
            f"{checkpoint.state} does not hold the training state this version writes ({error})"[:280]
        ) from None
    if checkpoint.name.startswith("step_") and int(checkpoint.name[5:]) != state.train.step:
        raise CheckpointError(
            f"{checkpoint.state} says step {state.train.step} but sits in {checkpoint.name}; the checkpoint was altered"
        )
    return state


def check_rng_states(rng: dict[str, torch.Tensor], checkpoint: CheckpointDir) -> None:
    """Every saved generator state is a byte tensor of the size this torch's generators take, and each CPU
    one a state a generator takes."""
    sizes = {"cpu": torch.get_rng_state().numel()}
    if "torch" not in rng:
        raise CheckpointError(f"{checkpoint.rng} holds no CPU random state; the checkpoint is damaged")
    for name, state in rng.items():
        kind = "cpu" if name == "torch" else name.partition("_rank")[0]
        if kind not in ("cpu", "cuda") or (name != "torch" and not name.partition("_rank")[2].isdigit()):
            raise CheckpointError(f"{checkpoint.rng} holds {name!r}, which is not a random state encdec saves")
        size = sizes.get(kind)
        if state.dtype != torch.uint8 or state.dim() != 1 or (size is not None and state.numel() != size):
            raise CheckpointError(
                f"{checkpoint.rng}: {name} is a {tuple(state.shape)} {state.dtype} tensor, not the random state "
                f"torch saves{f' ({size} bytes)' if size else ''}; the checkpoint is damaged"
            )
        if kind == "cpu" and not is_generator_state(state):
            raise CheckpointError(
                f"{checkpoint.rng}: {name} is not a random state torch can restore; the checkpoint is damaged"
            )


def is_generator_state(state: torch.Tensor) -> bool:
    """Whether a CPU generator takes `state` (a Mersenne Twister state of the right bytes, not any bytes)."""
    try:
        torch.Generator().set_state(state)
    except RuntimeError:
        return False
    return True
