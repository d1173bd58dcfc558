"""Training: the run config, the loop, checkpoints, and scale-out under torchrun."""

from encdec.training.config import RunConfig, load_config
from encdec.training.trainer import TrainResult, evaluate, train

__all__ = ["RunConfig", "TrainResult", "evaluate", "load_config", "train"]
