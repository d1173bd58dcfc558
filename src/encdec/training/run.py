"""A trained run read back for use: its model, tokenizer and config, from one checkpoint."""

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError
from encdec.models import build_model
from encdec.safe_paths import inside
from encdec.tokenizers import Tokenizer, load_tokenizer
from encdec.training.checkpoint import CHECKPOINTS, checkpoint_dir, load_weights, read_pointer
from encdec.training.config import RunConfig, build_model_config, load_config
from encdec.training.pretrained import read_generation


@dataclass
class LoadedRun:
    model: nn.Module
    tokenizer: Tokenizer
    config: RunConfig
    checkpoint: Path


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / CHECKPOINTS / "latest").is_file()


def run_checkpoint(run_dir: str | Path, which: str = "best") -> Path:
    """The directory of checkpoint `which` ("best", "latest", or a step directory name) of a run."""
    root = Path(run_dir) / CHECKPOINTS
    name = read_pointer(root, which) or (read_pointer(root, "latest") if which == "best" else None)
    if name is None and (root / which).is_dir():
        name = which
    if name is None:
        raise CheckpointError(f"{run_dir} has no checkpoint {which!r}; is it a run directory of encdec train?")
    return checkpoint_dir(root, name)


def load_run(run_dir: str | Path, which: str = "best") -> LoadedRun:
    """The model of checkpoint `which` ("best", "latest", or a step directory name), in eval mode."""
    checkpoint = run_checkpoint(run_dir, which)
    config = load_config(inside(checkpoint, "config.yaml"), paths_from_file=False)
    tokenizer = load_tokenizer(inside(checkpoint, "tokenizer"))
    tok = tokenizer
    model = build_model(build_model_config(config.model, tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id))
    try:
        model.load_state_dict(load_weights(inside(checkpoint, "model.safetensors")))
    except RuntimeError as error:
        raise CheckpointError(f"{checkpoint} does not match its config ({str(error).splitlines()[0]})") from None
    model.generation_defaults = read_generation(checkpoint)  # what encdec.generate starts from
    return LoadedRun(model.eval(), tokenizer, config, checkpoint)
