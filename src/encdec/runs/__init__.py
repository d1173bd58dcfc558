"""A trained run, owned in one place: its directory, checkpoints, and the run read back for use.

    run_dir.py        the layout of a run directory and of one checkpoint (RunDir, CheckpointDir)
    checkpoint.py     checkpoints written atomically and read back; the one weight loader (load_state)
    description.py    what a checkpoint says about itself (model.json, text.json, adapter.json), so it opens
                      without the training config; a checkpoint from before them, read from its config.yaml
    model_section.py  a run config's model section made a ModelConfig (build_model_config)
    load.py           a checkpoint read back for use (load_run -> LoadedRun: model, tokenizer, description,
                      generation defaults, text encoding)
    text.py           text in and out as the run's training fed it (TextFormat, RunTokenizer)
    open.py           a path opened as whatever it holds, a run, a checkpoint directory or a Hugging Face
                      directory (open_model, from_pretrained, load_tokenizer)
    adapter.py        a LoRA run's checkpoints: the adapter alone and a pointer to its hashed base (load_adapted)
    state.py          a checkpoint's training state and RNG states, declared (what a resume reads)
    export.py         a run's checkpoint written as a Hugging Face directory (export_run), or its adapter as
                      a peft adapter directory (export_adapter)

Training (encdec.training) writes runs through this package and keeps the run config (RunConfig,
load_config: encdec.training.run_config); inference, export and the CLI read runs through it, and
nothing here imports the training loop or its config.
"""

from encdec.runs.load import LoadedRun, load_run
from encdec.runs.open import OpenedModel, from_pretrained, load_tokenizer, model_kind, open_model
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.runs.run_export import export_run
from encdec.runs.text import RunTokenizer

__all__ = [
    "CheckpointDir",
    "LoadedRun",
    "OpenedModel",
    "RunDir",
    "RunTokenizer",
    "export_run",
    "from_pretrained",
    "load_run",
    "load_tokenizer",
    "model_kind",
    "open_model",
]
