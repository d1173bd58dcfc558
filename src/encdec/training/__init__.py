"""Training: the loop, its data, optimizers and numerics, and scale-out under torchrun.

The run it writes (directory, config, checkpoints) is encdec.runs'. `train`, `evaluate` and
`TrainResult` are imported on first use, so `import encdec.training` does not load the loop.
"""

from encdec.lazy_names import lazy_getattr
from encdec.training.run_config import RunConfig, load_config

LOOP_NAMES = ("TrainResult", "evaluate", "train")
__getattr__ = lazy_getattr(__name__, {"encdec.training.trainer": LOOP_NAMES})


__all__ = ["RunConfig", "TrainResult", "evaluate", "load_config", "train"]
