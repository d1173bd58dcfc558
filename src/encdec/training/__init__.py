"""Training: the loop, its data, optimizers and numerics, and scale-out under torchrun.

The run it writes (directory, config, checkpoints) is encdec.runs'. `train`, `evaluate` and
`TrainResult` are imported on first use, so `import encdec.training` does not load the loop.
"""

from encdec.training.run_config import RunConfig, load_config

LOOP_NAMES = ("TrainResult", "evaluate", "train")


def __getattr__(name: str):
    if name in LOOP_NAMES:
        from encdec.training import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'encdec.training' has no attribute {name!r}")


__all__ = ["RunConfig", "TrainResult", "evaluate", "load_config", "train"]
