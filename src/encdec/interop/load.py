"""A local Hugging Face model directory (T5, SwitchTransformers, Marian, Pegasus, BART, mBART) read into an encdec model."""

import re
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.interop.generation_config import checked_defaults, read_generation_defaults
from encdec.interop.hf_bart import load_hf_bart, load_hf_mbart
from encdec.interop.hf_marian import load_hf_marian
from encdec.interop.hf_pegasus import load_hf_pegasus
from encdec.interop.hf_switch import load_hf_switch
from encdec.interop.hf_t5 import load_hf_t5
from encdec.schema import load_json, short

# Hugging Face model_type -> loader; a new architecture adds a line here
LOADERS = {
    "t5": load_hf_t5,
    "marian": load_hf_marian,
    "pegasus": load_hf_pegasus,
    "bart": load_hf_bart,
    "mbart": load_hf_mbart,
    "switch_transformers": load_hf_switch,
}


# The config.json key each ModelConfig field is read from (where the names differ), so that a refused
# value is named as the file names it too.
T5_KEYS = {
    "d_head": "d_kv",
    "n_heads": "num_heads",
    "n_encoder_layers": "num_layers",
    "n_decoder_layers": "num_decoder_layers",
    "relative_buckets": "relative_attention_num_buckets",
    "relative_max_distance": "relative_attention_max_distance",
    "dropout": "dropout_rate",
    "norm_eps": "layer_norm_epsilon",
    "n_experts": "num_experts",
}
BART_KEYS = {
    "n_heads": "encoder_attention_heads",
    "d_ff": "encoder_ffn_dim",
    "n_encoder_layers": "encoder_layers",
    "n_decoder_layers": "decoder_layers",
    "max_positions": "max_position_embeddings",
}
IDS = {"pad_id": "pad_token_id", "eos_id": "eos_token_id", "decoder_start_id": "decoder_start_token_id"}
HF_KEYS = {
    "t5": T5_KEYS | IDS,
    "switch_transformers": T5_KEYS | IDS,
    "bart": BART_KEYS | IDS,
    "mbart": BART_KEYS | IDS,
    "marian": BART_KEYS | IDS,
    "pegasus": BART_KEYS | IDS,
}


def is_hf_dir(path: Path) -> bool:
    """Whether `path` is a Hugging Face model directory: it holds a config.json."""
    return (path / "config.json").is_file()


def load_hf(path: str | Path) -> nn.Module:
    """Load a local Hugging Face model directory (T5, SwitchTransformers, Marian, Pegasus, BART or mBART) into encdec.

    The checkpoint's generation settings (beams, forced EOS, banned tokens, lengths)
    become `model.generation_defaults`, which `encdec.generate` starts from.
    """
    path = Path(path)
    hf_config = read_json(path / "config.json", required=True)
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or model_type not in LOADERS:  # checked before anything reads the rest
        raise CheckpointError(
            f"{path / 'config.json'}: model_type {short(model_type, 40)} is not supported; "
            f"supported: {', '.join(LOADERS)}"
        )
    try:
        model = LOADERS[model_type](path, hf_config)
    except (KeyError, TypeError, ValueError) as error:  # a config.json without the keys (or types) it needs
        detail = f"the key {error}" if isinstance(error, KeyError) else str(error).splitlines()[0][:100]
        raise CheckpointError(f"{path / 'config.json'} does not describe a {model_type} model ({detail})") from None
    except ConfigError as error:  # a value ModelConfig refuses: a size of 0, a negative layer count, ...
        ours = re.search(r"model\.(\w+)", str(error))
        theirs = HF_KEYS.get(model_type, {}).get(ours.group(1)) if ours else None
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
