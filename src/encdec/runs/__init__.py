"""A trained run, owned in one place: its directory, checkpoints, and the run read back for use.

    run_dir.py        the layout of a run directory and of one checkpoint (RunDir, CheckpointDir)
    checkpoint.py     checkpoints written atomically and read back; the one weight loader (load_state)
    pointer.py        a checkpoint's parts that point at weights kept elsewhere (a LoRA base, a teacher)
    description.py    what a checkpoint says about itself (model.json, text.json, adapter.json), so it opens
                      without the training config; a checkpoint from before them, read from its config.yaml
    model_section.py  a run config's model section, read once into the ModelConfig it builds (ModelSection)
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

from encdec.lazy_names import lazy_getattr

# imported on first use of their names (PEP 562): a run config's model section (model_section.py) reads
# without torch, which load.py and open.py bring
LAZY = {  # module -> the names it gives
    "encdec.runs.load": ("LoadedRun", "load_run"),
    "encdec.runs.open": ("OpenedModel", "from_pretrained", "load_tokenizer", "model_kind", "open_model"),
    "encdec.runs.run_dir": ("CheckpointDir", "RunDir"),
    "encdec.runs.run_export": ("export_run",),
    "encdec.runs.text": ("RunTokenizer",),
}

__getattr__ = lazy_getattr(__name__, LAZY)


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
