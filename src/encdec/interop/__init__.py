"""Loading and saving other libraries' checkpoints."""

import json
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError
from encdec.interop.hf_t5 import load_hf_t5, save_hf_t5


def load_hf(path: str | Path) -> nn.Module:
    """Load a local Hugging Face model directory (T5ForConditionalGeneration) into encdec."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"{path} is not a Hugging Face model directory: it has no config.json")
    try:
        hf_config = json.loads(config_file.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{config_file} is not valid JSON (line {error.lineno})") from None
    model_type = hf_config.get("model_type")
    if model_type == "t5":
        return load_hf_t5(path, hf_config)
    raise CheckpointError(f"{config_file}: model_type {model_type!r} is not supported; supported: t5")


def save_hf(model: nn.Module, path: str | Path) -> None:
    """Write a T5-family encdec model as a Hugging Face T5ForConditionalGeneration directory."""
    save_hf_t5(model, Path(path))


__all__ = ["load_hf", "save_hf"]
