"""A trained run read back for use: its model, tokenizer and config, from one checkpoint."""

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from encdec.errors import CheckpointError
from encdec.models import build_model
from encdec.tokenizers import Tokenizer, load_tokenizer
from encdec.training.checkpoint import load_weights
from encdec.training.config import RunConfig, build_model_config, load_config
from encdec.training.pretrained import read_generation
from encdec.training.run_dir import CheckpointDir, RunDir


@dataclass
class LoadedRun:
    model: nn.Module
    tokenizer: Tokenizer
    config: RunConfig
    checkpoint: CheckpointDir


def load_run(run_dir: str | Path | RunDir, which: str = "best") -> LoadedRun:
    """The model of checkpoint `which` ("best", "latest", or a step directory name), in eval mode."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    checkpoint = run.checkpoint(which)
    config = load_config(checkpoint.config, paths_from_file=False)
    tok = load_tokenizer(checkpoint.tokenizer)
    model = build_model(build_model_config(config.model, tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id))
    try:
        model.load_state_dict(load_weights(checkpoint.model))
    except RuntimeError as error:
        raise CheckpointError(f"{checkpoint.path} does not match its config ({str(error).splitlines()[0]})") from None
    model.generation_defaults = read_generation(checkpoint)  # what encdec.generate starts from
    return LoadedRun(model.eval(), tok, config, checkpoint)
