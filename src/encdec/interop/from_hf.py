"""A local Hugging Face model directory read into an encdec model, by its family (interop.families: T5,
SwitchTransformers, Marian, Pegasus, BART, mBART, ..., and the decoder-only Gemma 2, Gemma 3, Llama, Qwen2,
Qwen3), or its config.json alone read into a ModelConfig."""

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.interop.families import FAMILIES, Family
from encdec.interop.generation_config import checked_defaults, checked_options, read_generation_defaults
from encdec.models import ModelConfig
from encdec.models.weight_dtypes import named_dtype_problem
from encdec.schema import load_json, short

DTYPE_KEYS = ("dtype", "torch_dtype")  # the dtype the weights are stored in (torch_dtype before transformers 5)


def is_hf_dir(path: Path) -> bool:
    """Whether `path` is a Hugging Face model directory: it holds a config.json."""
    return (path / "config.json").is_file()


def load_hf(path: str | Path) -> nn.Module:
    """Load a local Hugging Face model directory of a family encdec reads (interop.families) into encdec.

    The checkpoint's generation settings (beams, forced EOS, banned tokens, lengths)
    become `model.generation_defaults`, which `encdec.generate` starts from; its family's own keys there
    (Whisper's lang_to_id, task_to_id, ...: Family.generation_keys) `model.hf_generation`, as read.
    """
    path = Path(path)
    family, hf_config = read_family(path / "config.json")
    with described(path / "config.json", family):
        model = family.load(path, hf_config)
    vocab, generation = model.config.vocab_size, path / "generation_config.json"
    checked_options(read_generation_defaults(hf_config, {}), path / "config.json", vocab)  # each file named for its own
    written = read_json(generation)
    defaults = read_generation_defaults(hf_config, written)
    where = generation if generation.is_file() else path / "config.json"
    model.generation_defaults = checked_defaults(defaults, where, vocab)
    model.hf_generation = {key: written[key] for key in family.generation_keys if key in written}  # Whisper's own
    return model


def hf_model_config(file: str | Path) -> ModelConfig:
    """The ModelConfig a Hugging Face config.json `file` describes (a directory: its config.json), read without
    a weight: what `encdec size` counts. Its head is tied unless tie_word_embeddings says false."""
    file = Path(file)
    file = file / "config.json" if file.is_dir() else file
    family, hf_config = read_family(file)
    if family.config is None:
        raise CheckpointError(f"{file}: encdec does not yet read a {family.model_type} config.json without its weights")
    with described(file, family):
        return family.config(hf_config)


def read_family(file: Path) -> tuple[Family, dict]:
    """A config.json's family (interop.families) and its keys; a model_type outside the table, or a dtype no
    weight is stored in (models.weight_dtypes), is one sentence naming the key."""
    hf_config = read_json(file, required=True)
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:  # checked before anything reads the rest
        raise CheckpointError(
            f"{file}: model_type {short(model_type, 40)} is not supported; supported: {', '.join(FAMILIES)}"
        )
    for key in DTYPE_KEYS:
        problem = named_dtype_problem(hf_config.get(key))
        if problem:
            raise CheckpointError(f"{file}: {key} {problem}")
    return FAMILIES[model_type], hf_config


@contextmanager
def described(file: Path, family: Family) -> Iterator[None]:
    """A config.json without the keys (or types) its family needs, or with a value ModelConfig refuses, as one
    sentence (CheckpointError) naming the file and, where it has another name there, its key."""
    try:
        yield
    except (KeyError, TypeError, ValueError) as error:
        detail = f"the key {error}" if isinstance(error, KeyError) else str(error).splitlines()[0][:100]
        raise CheckpointError(f"{file} does not describe a {family.model_type} model ({detail})") from None
    except ConfigError as error:  # a value ModelConfig refuses: a size of 0, a negative layer count, ...
        ours = re.search(r"model\.([\w.]*\w)", str(error))
        theirs = family.keys.get(ours.group(1)) if ours else None
        named = f" (config.json's {theirs})" if theirs else ""
        raise CheckpointError(f"{file}: {error}{named}") from None


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
