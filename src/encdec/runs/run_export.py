"""A run's checkpoint (or a checkpoint directory on its own) written as a Hugging Face directory (`encdec export
RUN_DIR --out DIR`), a LoRA run's with its adapters merged in; or a LoRA run's adapters alone as a peft adapter
directory (`--adapter`)."""

import json
import logging
from pathlib import Path

from encdec.errors import CheckpointError, ConfigError
from encdec.interop import export_hf
from encdec.interop.peft_adapter import save_peft_adapter
from encdec.models.lora import merge_lora
from encdec.runs.adapter import read_base
from encdec.runs.load import LoadedRun, load_run
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.safe_paths import write_atomic
from encdec.schema import load_json
from encdec.tokenizers.languages import target_language

log = logging.getLogger(__name__)


def check_paths(run_dir: Path, out: Path) -> None:
    if not RunDir(run_dir).is_run() and not CheckpointDir(run_dir).is_checkpoint():
        raise CheckpointError(
            f"{run_dir} is not a run directory of encdec train (it has no checkpoints/latest) nor a checkpoint directory"
        )
    if out.resolve() == run_dir.resolve() or run_dir.resolve() in out.resolve().parents:
        raise ConfigError(f"the output directory {out} is inside the run directory {run_dir}; choose one outside it")


def export_adapter(run_dir: str | Path, out: str | Path, force: bool = False, checkpoint: str | None = None) -> str:
    """Write the LoRA adapters of checkpoint `checkpoint` of a run (or of a checkpoint directory) as a peft
    adapter directory; returns its base."""
    run_dir, out = Path(run_dir), Path(out)
    check_paths(run_dir, out)
    run = load_run(run_dir, checkpoint)
    if run.description.adapter is None:
        raise ConfigError(f"{run_dir} trained every parameter, not LoRA adapters; export it without --adapter")
    base = read_base(run.checkpoint).init_from
    save_peft_adapter(run.model, out, base, force)
    return base


def export_run(run_dir: str | Path, out: str | Path, force: bool = False, checkpoint: str | None = None) -> str:
    """Export checkpoint `checkpoint` of an `encdec train` run directory (or a checkpoint directory itself);
    returns the Hugging Face class name."""
    run_dir, out = Path(run_dir), Path(out)
    check_paths(run_dir, out)
    run = load_run(run_dir, checkpoint)
    if run.description.adapter is not None:
        merge_lora(run.model)  # W + (alpha / r) B A: plain linear layers again
    name = export_hf(run.model, run.tokenizer, out, run.generation, force)
    write_languages(run, out)
    template = run.description.text.source_template
    if template != "{source}":
        log.warning(
            "this run formats each source as %r before tokenizing; do the same with the exported tokenizer", template
        )
    return name


def write_languages(run: LoadedRun, out: Path) -> None:
    """The languages the run was trained in, as transformers reads them from the exported directory: the
    tokenizer's src_lang and tgt_lang (tokenizer_config.json), and the target's code as generation starts
    it (generation_config.json: forced_bos_token_id, or mBART's decoder_start_token_id). A language the run's
    directions do not share is left to the user, said in one line."""
    if not run.description.text.languages:
        return
    codes, unshared = {}, []
    for option in ("src_lang", "tgt_lang"):
        try:
            codes[option] = run.text.language(option, None)
        except ConfigError:
            unshared.append(option)
    if unshared:
        trained = ", ".join(map(str, run.description.text.languages))
        log.warning(
            "the run was trained in %d directions (%s): the exported tokenizer keeps its own %s; set them as "
            "transformers does (AutoTokenizer.from_pretrained(..., src_lang=...), forced_bos_token_id)",
            len(run.description.text.languages),
            trained,
            " and ".join(unshared),
        )
    codes = {option: code for option, code in codes.items() if code is not None}
    if not codes:
        return
    tokenizer_config = out / "tokenizer_config.json"
    write_atomic(tokenizer_config, json.dumps(load_json(tokenizer_config, "the tokenizer config") | codes, indent=2))
    if "tgt_lang" in codes:
        forced, start = target_language(run.tokenizer.hf, codes["tgt_lang"])
        written = {"forced_bos_token_id": forced} if forced is not None else {"decoder_start_token_id": start}
        generation = out / "generation_config.json"
        values = load_json(generation, "the generation config") | written
        write_atomic(generation, json.dumps(values, indent=2) + "\n")
