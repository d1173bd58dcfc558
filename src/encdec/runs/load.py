"""A trained run read back for use: its model, tokenizer, config, generation defaults and text encoding,
from one checkpoint."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.generation.config import SourceLength
from encdec.interop.generation_config import checked_defaults
from encdec.models import ModelConfig, build_model
from encdec.models.config import CAUSAL_LMS
from encdec.models.memory import check_weights_fit
from encdec.runs.adapter import load_adapted
from encdec.runs.checkpoint import load_state, load_weights, saved_config
from encdec.runs.config import RunConfig, build_model_config
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.runs.text import RunTokenizer
from encdec.schema import load_json, value_of
from encdec.tokenizers import Tokenizer, load_tokenizer


@dataclass
class LoadedRun:
    """One checkpoint of a run, ready to generate from."""

    model: nn.Module  # in eval mode
    tokenizer: Tokenizer
    config: RunConfig
    checkpoint: CheckpointDir
    generation: dict[str, Any]  # the generation defaults the checkpoint carries (generation.json), {} if none
    text: RunTokenizer  # text in and out as the run's training fed it


def load_run(run_dir: str | Path | RunDir, which: str = "best", max_source_len: int | None = None) -> LoadedRun:
    """Checkpoint `which` ("best", "latest", or a step directory name) of a run, its model in eval mode and
    carrying the checkpoint's generation defaults (`model.generation_defaults`, what generate starts from).
    The text encoder cuts inputs to `max_source_len` tokens (default: the run's trained source length)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    checkpoint = run.checkpoint(which)
    config = saved_config(checkpoint)
    tok = load_tokenizer(checkpoint.tokenizer)
    model_cfg = build_model_config(config.model, tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id)
    check_weights_fit(model_cfg, "cpu", error=CheckpointError, source=f"{checkpoint.config}: ")  # before building
    check_max_source_len(max_source_len, model_cfg)
    model = build_model(model_cfg)
    if config.lora is not None:  # an adapter alone: on its base (runs/adapter.py)
        load_adapted(model, config, checkpoint, load_weights(checkpoint.model))
    else:
        load_state(model, load_weights(checkpoint.model), f"{checkpoint.path} does not match its config")
    generation = read_generation(checkpoint)
    model.generation_defaults = generation
    text = RunTokenizer.for_run(config, tok, model, max_source_len)
    return LoadedRun(model.eval(), tok, config, checkpoint, generation, text)


def check_max_source_len(max_source_len: int | None, cfg: ModelConfig) -> None:
    """ConfigError where inputs would be cut to more tokens than generation takes (SourceLength) or than
    the model's absolute position table or a causal LM's context holds (a longer input could not be encoded)."""
    if max_source_len is None:
        return
    value_of(SourceLength, max_source_len, "max_source_len")
    if (cfg.position in ("sinusoidal", "learned") or cfg.family in CAUSAL_LMS) and max_source_len > cfg.max_positions:
        raise ConfigError(
            f"max_source_len is {max_source_len:,} but this model has {cfg.max_positions:,} positions for its input"
        )


def read_generation(checkpoint: CheckpointDir) -> dict[str, Any]:
    """The generation defaults a checkpoint carries ({} if none), each as GenerationConfig declares it."""
    path = checkpoint.generation
    if not path.is_file():
        return {}
    values = load_json(path, "generation defaults", CheckpointError)
    if not isinstance(values, dict):
        raise CheckpointError(f"{path} must hold a JSON object of generation options")
    return checked_defaults(values, path)
