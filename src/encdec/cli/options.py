"""Options several commands share, each derived from the declaration of what it sets.

add_generation_options  --max-new-tokens, --num-beams, ...: GenerationConfig's fields exposed to the CLI
add_reader_options      --text-field, --source-field, ...: encdec.data.formats.ReaderOptions' fields
whole_number, --max-source-len, --device, --quantize: what generate, evaluate, attention and serve share
"""

import argparse
import dataclasses
import typing
from typing import Annotated

import torch

from encdec.data.formats import FILE_FORMATS, FORMATS, OPTION_NAMES, ReaderOptions
from encdec.errors import ConfigError
from encdec.generation.config import CLI_OPTIONS, GenerationConfig, SourceLength
from encdec.quantization import SCHEMES
from encdec.schema import Range, argument_type, field_type


def flag_of(name: str) -> str:
    """A declared name as its command-line flag: source_field -> --source-field."""
    return "--" + name.replace("_", "-")


def add_reader_options(
    parser: argparse.ArgumentParser, default: str = "", formats: tuple[str, ...] = FILE_FORMATS
) -> None:
    """A flag for each reader option one of `formats` takes (not given: None), its help naming those formats;
    `default` says where a value not given comes from before ReaderOptions' own default."""
    for option in dataclasses.fields(ReaderOptions):
        takers = " / ".join(name for name in formats if option.name in FORMATS[name].options)
        if not takers:  # no format the command reads takes it (passkey's text has no fields or header)
            continue
        flag = flag_of(option.name)
        said = f"{takers}: {option.metadata['help']}"
        if option.type is bool:  # a switch: given, True; not given, None (the config's or the default, False)
            parser.add_argument(flag, dest=option.name, action="store_const", const=True, default=None, help=said)
            continue
        parser.add_argument(
            flag,
            dest=option.name,
            type=field_type(ReaderOptions, option.name, flag),
            default=None,
            help=f"{said} (default: {default}{option.default!r})",
        )


def given_reader_options(args: argparse.Namespace) -> dict:
    """The reader options the command line gave (None where not given)."""
    return {name: getattr(args, name, None) for name in OPTION_NAMES}


def add_generation_options(parser: argparse.ArgumentParser, defaults: dict | None = None) -> None:
    """--NAME for each GenerationConfig field exposed to the command line (CLI_OPTIONS), taking the values its
    declaration allows, with its declared help; not given: None (the model's default), or `defaults`' value."""
    for name in CLI_OPTIONS:
        add_generation_option(parser, name, (defaults or {}).get(name))


def add_generation_option(parser: argparse.ArgumentParser, name: str, default, help: str | None = None) -> None:
    """--NAME for GenerationConfig's field `name`: a switch for a true-or-false one, else a value it allows;
    its help the field's own unless `help` says what the option does in a command of its own."""
    annotation = typing.get_type_hints(GenerationConfig, include_extras=True)[name]
    help = help or next(f for f in dataclasses.fields(GenerationConfig) if f.name == name).metadata.get("help")
    help += f" (default {default})" if default is not None else ""
    flag = flag_of(name)
    if annotation is bool:
        parser.add_argument(flag, dest=name, action="store_const", const=True, default=default, help=help)
    else:
        parser.add_argument(flag, dest=name, type=argument_type(annotation, flag), default=default, help=help)


def given_generation_options(args: argparse.Namespace) -> dict:
    """The generation options the command line set (those left at None are the model's to decide)."""
    return {name: getattr(args, name) for name in CLI_OPTIONS if getattr(args, name) is not None}


MAX_ROWS = 1 << 20  # inputs or examples decoded together


def whole_number(low: int, high: int, flag: str):
    """An argparse type: a whole number from `low` to `high`, declared and checked as a config field is."""
    return argument_type(Annotated[int, Range(low, high)], flag)


def add_dtype_argument(parser: argparse.ArgumentParser) -> None:
    """--dtype: the dtype the model is opened in (encdec.runs.model_dtype); by default the one it was stored in."""
    from encdec.runs.model_dtype import CHOICES

    parser.add_argument(
        "--dtype",
        choices=CHOICES,
        default="auto",
        help="the model's dtype: auto (default) keeps the one its weights were stored in, as transformers does "
        "(a bf16 checkpoint stays bf16; an encdec run is float32); float32, bfloat16, float16 cast it",
    )


def open_to_decode(path, args: argparse.Namespace, device, max_source_len: int | None = None):
    """runs.open_model for a decoding command (generate, serve, transcribe): its --checkpoint and --dtype, and under
    --dtype auto a float32 model in the dtype its CPU multiplies natively (runs.model_dtype.native_dtype)."""
    from encdec.runs.model_dtype import native_dtype
    from encdec.runs.open import open_model

    prefer = native_dtype(args.dtype, device, args.quantize)
    return open_model(path, args.checkpoint, max_source_len, dtype=args.dtype, prefer=prefer)


def add_checkpoint_argument(parser: argparse.ArgumentParser) -> None:
    """--checkpoint: which of a run's checkpoints; unset (None) the best. A checkpoint or Hugging Face directory
    has none to choose, and one named there is refused (runs.load.refuse_choice), not ignored."""
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="a run's checkpoint: best (default), latest, a step directory or an averaged one (avg5_step_...); "
        "a checkpoint or Hugging Face directory has none to choose",
    )


def add_source_length_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-source-len",
        type=argument_type(SourceLength, "--max-source-len"),
        default=None,
        help="cut longer inputs to this many tokens (default: the length the model was trained "
        "with: a run's objective lengths, a Hugging Face tokenizer's model_max_length)",
    )


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", default="auto", help="cpu, cuda, cuda:N, or auto (default): cuda when torch sees a GPU, else cpu"
    )


def add_quantize_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quantize",
        choices=SCHEMES,
        default=None,
        help="int8: int8 linear layers on --device, at a small cost in accuracy (the CPU "
        "needs an fp32 model; a GPU takes fp32, bf16 or fp16)",
    )


def resolve_device(name: str) -> torch.device:
    """The torch.device --device names; asking for a GPU torch cannot see is one sentence (ConfigError)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be cpu, cuda, cuda:N or auto, got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name} asks for a GPU but torch sees none; use --device cpu or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(f"--device {name} asks for GPU {device.index} but torch sees only {count} GPU(s)")
    return device
