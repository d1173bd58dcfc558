"""A run's checkpoint written as a Hugging Face directory (`encdec export RUN_DIR --out DIR`)."""

import logging
from pathlib import Path

from encdec.errors import CheckpointError, ConfigError
from encdec.interop import export_hf
from encdec.runs.load import load_run
from encdec.runs.run_dir import RunDir

log = logging.getLogger(__name__)


def export_run(run_dir: str | Path, out: str | Path, force: bool = False, checkpoint: str = "best") -> str:
    """Export checkpoint `checkpoint` of an `encdec train` run directory; returns the Hugging Face class name."""
    run_dir, out = Path(run_dir), Path(out)
    if not RunDir(run_dir).is_run():
        raise CheckpointError(f"{run_dir} is not a run directory of encdec train (it has no checkpoints/latest)")
    if out.resolve() == run_dir.resolve() or run_dir.resolve() in out.resolve().parents:
        raise ConfigError(f"the output directory {out} is inside the run directory {run_dir}; choose one outside it")
    run = load_run(run_dir, checkpoint)
    name = export_hf(run.model, run.tokenizer, out, run.generation, force)
    objective = run.config.objective
    if objective.kind == "seq2seq" and objective.source_template != "{source}":
        log.warning(
            "this run formats each source as %r before tokenizing; do the same with the exported tokenizer",
            objective.source_template,
        )
    return name
