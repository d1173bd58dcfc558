"""A local Hugging Face model directory (T5, SwitchTransformers, Marian, BART) read into an encdec model."""

import json
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError
from encdec.interop.generation_config import read_generation_defaults
from encdec.interop.hf_bart import load_hf_bart, load_hf_mbart
from encdec.interop.hf_marian import load_hf_marian
from encdec.interop.hf_switch import load_hf_switch
from encdec.interop.hf_t5 import load_hf_t5

# Hugging Face model_type -> loader; a new architecture adds a line here
LOADERS = {
    "t5": load_hf_t5,
    "marian": load_hf_marian,
    "bart": load_hf_bart,
    "mbart": load_hf_mbart,
    "switch_transformers": load_hf_switch,
}


def is_hf_dir(path: Path) -> bool:
    """Whether `path` is a Hugging Face model directory: it holds a config.json."""
    return (path / "config.json").is_file()


def load_hf(path: str | Path) -> nn.Module:
    """Load a local Hugging Face model directory (T5, SwitchTransformers, Marian or BART) into encdec.

    The checkpoint's generation settings (beams, forced EOS, banned tokens, lengths)
    become `model.generation_defaults`, which `encdec.generate` starts from.
    """
    path = Path(path)
    hf_config = read_json(path / "config.json", required=True)
    model_type = hf_config.get("model_type")
    if model_type not in LOADERS:
        raise CheckpointError(
            f"{path / 'config.json'}: model_type {model_type!r} is not supported; supported: {', '.join(LOADERS)}"
        )
    try:
        model = LOADERS[model_type](path, hf_config)
    except (KeyError, TypeError, ValueError) as error:  # a config.json without the keys (or types) it needs
        detail = f"the key {error}" if isinstance(error, KeyError) else str(error).splitlines()[0][:100]
        raise CheckpointError(f"{path / 'config.json'} does not describe a {model_type} model ({detail})") from None
    model.generation_defaults = read_generation_defaults(hf_config, read_json(path / "generation_config.json"))
    return model


def read_json(file: Path, required: bool = False) -> dict:
    if not file.is_file():
        if required:
            raise CheckpointError(f"{file.parent} is not a Hugging Face model directory: it has no {file.name}")
        return {}
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{file} is not valid JSON (line {error.lineno})") from None
