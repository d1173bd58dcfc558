"""A trained run read back for use: its model, tokenizer, description, generation defaults and text encoding,
from one checkpoint, which may be a checkpoint directory on its own, out of its run."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.generation.config import SourceLength
from encdec.interop.generation_config import checked_defaults
from encdec.models import ModelConfig, build_model
from encdec.models.model_config import CAUSAL_LMS
from encdec.models.weights_memory import check_weights_fit
from encdec.runs.adapter import load_adapted
from encdec.runs.checkpoint import load_state, load_weights
from encdec.runs.description import Description, describe, read_description
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.runs.speech_text import SpeechText, input_encoding
from encdec.runs.text import RunTokenizer
from encdec.schema import load_json, value_of
from encdec.tokenizers import Tokenizer, load_tokenizer


@dataclass
class LoadedRun:
    """One checkpoint of a run, ready to generate from."""

    model: nn.Module  # in eval mode
    tokenizer: Tokenizer
    description: Description  # its model config, text format and (LoRA) adapter config
    checkpoint: CheckpointDir
    generation: dict[str, Any]  # the generation defaults the checkpoint carries (generation.json), {} if none
    text: RunTokenizer | SpeechText  # text in and out as the run's training fed it (a speech run: recordings in)
    chosen: str = ""  # why this checkpoint: "the run's best", "the latest: the run has kept no best ...", ...


def load_run(path: str | Path | RunDir, which: str | None = None, max_source_len: int | None = None) -> LoadedRun:
    """Checkpoint `which` ("best", "latest", or a step directory name; None: the best) of a run, or the checkpoint
    directory `path` itself (which names none: it has no other to choose), its model in eval mode and carrying
    the checkpoint's generation defaults (`model.generation_defaults`, what generate starts from). The model,
    tokenizer and text encoding are what the checkpoint describes (runs/description.py), never the training
    config; its model.json is read and checked before the tokenizer is opened. The text encoder cuts inputs to
    `max_source_len` tokens (default: the run's trained source length)."""
    checkpoint, chosen = chosen_checkpoint(path, which)
    described = read_description(checkpoint) if checkpoint.model_config.exists() else None
    tok = load_tokenizer(checkpoint.tokenizer)
    description = described or describe(checkpoint, tok)  # one from before model.json: its config and tokenizer
    said = checkpoint.model_config if checkpoint.model_config.exists() else checkpoint.config
    check_weights_fit(description.model, "cpu", error=CheckpointError, source=f"{said}: ")  # before building
    check_max_source_len(max_source_len, description.model)
    try:
        model = build_model(description.model)
    except ConfigError as error:  # what a family's constructor alone refuses (a causal LM's positions, ...)
        raise CheckpointError(f"{said} describes a model encdec cannot build ({error})") from None
    if description.adapter is not None:  # an adapter alone: on its base (runs/adapter.py)
        load_adapted(model, description.adapter, checkpoint, load_weights(checkpoint.model))
    else:
        load_state(model, load_weights(checkpoint.model), f"{checkpoint.path} does not match its config")
    generation = read_generation(checkpoint, description.model.vocab_size)
    model.generation_defaults = generation
    text = input_encoding(description.model, RunTokenizer.for_text(description.text, tok, max_source_len))
    return LoadedRun(model.eval(), tok, description, checkpoint, generation, text, chosen)


def checkpoint_at(path: str | Path | RunDir, which: str | None = None) -> CheckpointDir:
    """Checkpoint `which` of the run at `path` (None: the best), or `path` itself where it is a checkpoint
    directory (which holds no other checkpoint to choose: any `which` is refused)."""
    return chosen_checkpoint(path, which)[0]


def chosen_checkpoint(path: str | Path | RunDir, which: str | None = None) -> tuple[CheckpointDir, str]:
    """checkpoint_at's checkpoint and why it is that one, in words (RunDir.chosen)."""
    run = path if isinstance(path, RunDir) else RunDir(path)
    if run.is_run() or not CheckpointDir(run.path).is_checkpoint():
        return run.chosen(which or "best")
    refuse_choice(which, run.path, "one checkpoint directory, not a run")
    return CheckpointDir(run.path), "a checkpoint directory on its own"


def refuse_choice(which: str | None, path: Path, what: str) -> None:
    """A checkpoint named (`which`, None where none was) for `path`, which is `what` and so holds no checkpoints
    to choose among: one sentence, where the name would otherwise be ignored."""
    if which is not None:
        raise ConfigError(
            f"{path} is {what}: it holds no checkpoint {which!r}; --checkpoint picks one of a run's checkpoints, "
            "so leave it out"
        )


def check_max_source_len(max_source_len: int | None, cfg: ModelConfig) -> None:
    """ConfigError where inputs would be cut to more tokens than generation takes (SourceLength) or than
    the model's absolute position table or a causal LM's context holds (a longer input could not be encoded)."""
    if max_source_len is None:
        return
    value_of(SourceLength, max_source_len, "max_source_len")
    rows = cfg.encoder_config().positions.max  # an encoder's own table (model.encoder.max_positions), else the model's
    if (cfg.positions.kind in ("sinusoidal", "learned") or cfg.family in CAUSAL_LMS) and max_source_len > rows:
        raise ConfigError(f"max_source_len is {max_source_len:,} but this model has {rows:,} positions for its input")


def read_generation(checkpoint: CheckpointDir, vocab_size: int | None = None) -> dict[str, Any]:
    """The generation defaults a checkpoint carries ({} if none), each as GenerationConfig declares it, its token
    ids below the model's `vocab_size` (None: where generate resolves them against the model it runs)."""
    path = checkpoint.generation
    if not path.is_file():
        return {}
    values = load_json(path, "generation defaults", CheckpointError)
    if not isinstance(values, dict):
        raise CheckpointError(f"{path} must hold a JSON object of generation options")
    return checked_defaults(values, path, vocab_size)
