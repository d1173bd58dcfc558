"""Loading and saving other libraries' checkpoints."""

import json
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError
from encdec.interop.export import export_hf, export_run
from encdec.interop.hf_bart import load_hf_bart, load_hf_mbart
from encdec.interop.hf_marian import load_hf_marian
from encdec.interop.hf_switch import load_hf_switch
from encdec.interop.hf_t5 import load_hf_t5, save_hf_t5

# Hugging Face model_type -> loader; a new architecture adds a line here
LOADERS = {
    "t5": load_hf_t5,
    "marian": load_hf_marian,
    "bart": load_hf_bart,
    "mbart": load_hf_mbart,
    "switch_transformers": load_hf_switch,
}

# generation settings a checkpoint may carry (config.json, generation_config.json), by our option name
GENERATION_KEYS = (
    "num_beams",
    "length_penalty",
    "early_stopping",
    "no_repeat_ngram_size",
    "repetition_penalty",
    "bad_words_ids",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "max_new_tokens",
    "min_new_tokens",
)


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
    model.generation_defaults = generation_defaults(hf_config, read_json(path / "generation_config.json"))
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


def generation_defaults(hf_config: dict, generation_config: dict) -> dict:
    """The generation options a checkpoint sets; generation_config.json wins over config.json.

    Hugging Face's max_length and min_length count the decoder-start token; ours count new tokens.
    """
    defaults = {}
    for source in (hf_config, generation_config):
        values = dict(source)
        if values.get("max_length") is not None:
            values.setdefault("max_new_tokens", values["max_length"] - 1)
        if values.get("min_length"):
            values.setdefault("min_new_tokens", max(values["min_length"] - 1, 0))
        defaults.update({key: values[key] for key in GENERATION_KEYS if values.get(key) is not None})
    return defaults


def save_hf(model: nn.Module, path: str | Path) -> None:
    """Write a T5-family encdec model as a Hugging Face T5ForConditionalGeneration directory."""
    save_hf_t5(model, Path(path))


__all__ = ["export_hf", "export_run", "load_hf", "save_hf"]
