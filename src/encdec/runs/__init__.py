"""A trained run, owned in one place: its directory, config, checkpoints, and the run read back for use.

    run_dir.py       the layout of a run directory and of one checkpoint (RunDir, CheckpointDir)
    checkpoint.py    checkpoints written atomically and read back; the one weight loader (load_state)
    config.py        the run config (RunConfig, load_config), its fields declared with their rules (encdec.schema)
    load.py          a checkpoint read back for use (load_run -> LoadedRun: model, tokenizer, config,
                     generation defaults, text encoding)
    text.py          text in and out as the run's training fed it (RunTokenizer)
    open.py          a path opened as whatever it holds, a run or a Hugging Face directory (open_model,
                     from_pretrained, load_tokenizer)
    adapter.py       a LoRA run's checkpoints: the adapter alone and a pointer to its hashed base (load_adapted)
    export.py        a run's checkpoint written as a Hugging Face directory (export_run), or its adapter as
                     a peft adapter directory (export_adapter)

Training (encdec.training) writes runs through this package; inference, export and the CLI read them
through it, and nothing here imports the training loop.
"""

from encdec.runs.config import RunConfig, load_config
from encdec.runs.export import export_run
from encdec.runs.load import LoadedRun, load_run
from encdec.runs.open import OpenedModel, from_pretrained, load_tokenizer, model_kind, open_model
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.runs.text import RunTokenizer

__all__ = [
    "CheckpointDir",
    "LoadedRun",
    "OpenedModel",
    "RunConfig",
    "RunDir",
    "RunTokenizer",
    "export_run",
    "from_pretrained",
    "load_config",
    "load_run",
    "load_tokenizer",
    "model_kind",
    "open_model",
]
