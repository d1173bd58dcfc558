"""A local Hugging Face model directory read into an encdec model, by its family (interop.families: T5,
SwitchTransformers, Marian, Pegasus, BART, mBART)."""

import re
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.interop.families import FAMILIES
from encdec.interop.generation_config import checked_defaults, read_generation_defaults
from encdec.schema import load_json, short


def is_hf_dir(path: Path) -> bool:
    """Whether `path` is a Hugging Face model directory: it holds a config.json."""
    return (path / "config.json").is_file()


def load_hf(path: str | Path) -> nn.Module:
    """Load a local Hugging Face model directory of a family encdec reads (interop.families) into encdec.

    The checkpoint's generation settings (beams, forced EOS, banned tokens, lengths)
    become `model.generation_defaults`, which `encdec.generate` starts from.
    """
    path = Path(path)
    hf_config = read_json(path / "config.json", required=True)
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:  # checked before anything reads the rest
        raise CheckpointError(
            f"{path / 'config.json'}: model_type {short(model_type, 40)} is not supported; "
            f"supported: {', '.join(FAMILIES)}"
        )
    family = FAMILIES[model_type]
    try:
        model = family.load(path, hf_config)
    except (KeyError, TypeError, ValueError) as error:  # a config.json without the keys (or types) it needs
        detail = f"the key {error}" if isinstance(error, KeyError) else str(error).splitlines()[0][:100]
        raise CheckpointError(f"{path / 'config.json'} does not describe a {model_type} model ({detail})") from None
    except ConfigError as error:  # a value ModelConfig refuses: a size of 0, a negative layer count, ...
        ours = re.search(r"model\.(\w+)", str(error))
        theirs = family.keys.get(ours.group(1)) if ours else None
        named = f" (config.json's {theirs})" if theirs else ""
        raise CheckpointError(f"{path / 'config.json'}: {error}{named}") from None
    generation = path / "generation_config.json"
    model.generation_defaults = checked_defaults(read_generation_defaults(hf_config, read_json(generation)), generation)
    return model


def read_json(file: Path, required: bool = False) -> dict:
    """A Hugging Face JSON file's object ({} where an optional one is absent), read within bounds."""
    if not file.is_file():
        if required:
            raise CheckpointError(f"{file.parent} is not a Hugging Face model directory: it has no {file.name}")
        return {}
    values = load_json(file, "Hugging Face file", CheckpointError)
    if not isinstance(values, dict):
        raise CheckpointError(f"{file} must hold a JSON object, got {type(values).__name__}")
    return values
