"""Where fine-tuning starts (`training.init_from`): another encdec run or a Hugging Face checkpoint.

    init_from: runs/main               an encdec run: its best (else latest) checkpoint
    init_from: checkpoints/flan-t5-small   a local Hugging Face directory: T5, Flan-T5, mT5, BART, Marian

Either way the model section, the weights, the tokenizer and the generation defaults
come from there; the fine-tuning config's own model keys (dropout, say) go on top, and
the merged section is what the new run saves, so it is self-contained.
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.models import ModelConfig
from encdec.training.checkpoint import load_weights
from encdec.training.config import load_config
from encdec.training.run_dir import CheckpointDir, RunDir

log = logging.getLogger(__name__)


@dataclass
class Pretrained:
    """What a fine-tuning run takes from its starting point."""

    source: Path  # the checkpoint directory of a run, or the Hugging Face directory
    model_section: dict
    tokenizer_dir: Path
    weights: dict[str, torch.Tensor] = field(repr=False)
    generation: dict = field(default_factory=dict)


def is_hf_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and not RunDir(path).checkpoints.is_dir()


def load_pretrained(init_from: str) -> Pretrained:
    """The starting point `training.init_from` names; one sentence (CheckpointError) if it is neither kind."""
    path = Path(init_from)
    if is_hf_dir(path):
        return _from_hf(path)
    run = RunDir(path)
    if not run.is_run():
        raise CheckpointError(
            f"training.init_from {init_from} is neither a run directory with checkpoints "
            "nor a Hugging Face model directory (config.json)"
        )
    checkpoint = run.checkpoint("best")  # the latest where no best was kept
    try:
        section = load_config(checkpoint.config, paths_from_file=False).model
    except ConfigError as error:
        raise CheckpointError(f"the pretrained run's config cannot be read: {error}") from None
    weights = load_weights(checkpoint.model)
    return Pretrained(checkpoint.path, section, checkpoint.tokenizer, weights, read_generation(checkpoint))


def _from_hf(path: Path) -> Pretrained:
    from encdec.interop import load_hf

    model = load_hf(path)
    return Pretrained(path, model_section(model.config), path, model.state_dict(), model.generation_defaults)


def model_section(cfg: ModelConfig) -> dict:
    """A run config's model section that rebuilds `cfg` exactly (every field but default research options)."""
    section = cfg.to_dict()
    if section["research"] == ModelConfig().to_dict()["research"]:
        del section["research"]
    return section


def load_pretrained_weights(model: nn.Module, pretrained: Pretrained) -> None:
    try:
        model.load_state_dict(pretrained.weights)
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0]  # the first line only names the model class
        what = "Hugging Face checkpoint" if is_hf_dir(pretrained.source) else "run"
        raise CheckpointError(
            f"the model section does not match the pretrained {what} {pretrained.source} ({detail[:200]})"
        ) from None
    log.info("initialised from %s", pretrained.source)


def read_generation(checkpoint: CheckpointDir) -> dict:
    """The generation defaults a checkpoint carries ({} if none)."""
    path = checkpoint.generation
    if not path.is_file():
        return {}
    try:
        values = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise CheckpointError(f"{path} is not valid JSON") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{path} must hold a JSON object of generation options")
    return values
