"""An encdec model and its tokenizer as a Hugging Face directory AutoModelForSeq2SeqLM and AutoTokenizer load.

Each encoder-decoder layout goes to the Hugging Face class that computes the same logits:
    relative bias, dense feed-forward    T5ForConditionalGeneration (v1.0 tied and scaled, v1.1 untied)
    relative bias, mixture of experts    SwitchTransformersForConditionalGeneration (top-1, raw gates)
    sinusoidal positions, post-norm      MarianMTModel (the canonical Transformer, dimensions reordered)
    sinusoidal positions, pre-norm       PegasusForConditionalGeneration (likewise)
    learned positions, embedding norm    BartForConditionalGeneration (post-norm), MBartForConditionalGeneration (pre)
RoPE (ROT5), the research families and the RNN have no Hugging Face counterpart and are
refused; `encdec.from_pretrained(RUN_DIR)` loads them. Every check runs before a file is written.
The output directory must be new, empty or (with force) an earlier export: a directory holding
anything else is refused, and every file is written anew and renamed into place, so a link
planted there is replaced rather than written through.

    out/config.json, model.safetensors   the model (hf_t5, hf_switch, hf_marian, hf_pegasus, hf_bart)
    out/generation_config.json           decoder start, EOS, pad and the run's generation defaults
    out/tokenizer.json, tokenizer_config.json   the tokenizer (hf_tokenizer)
"""

import logging
from pathlib import Path

from torch import nn

from encdec.errors import ConfigError
from encdec.interop.generation_config import write_generation_config
from encdec.interop.hf_bart import check_bart_compatible, check_mbart_compatible, save_hf_bart, save_hf_mbart
from encdec.interop.hf_marian import check_marian_compatible, save_hf_marian
from encdec.interop.hf_pegasus import check_pegasus_compatible, save_hf_pegasus
from encdec.interop.hf_switch import check_switch_compatible, save_hf_switch
from encdec.interop.hf_t5 import check_t5_compatible, save_hf_t5
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.models import ModelConfig
from encdec.safe_paths import output_dir, output_path, refuse_unsafe_output
from encdec.tokenizers import Tokenizer

log = logging.getLogger(__name__)

# Hugging Face model_type -> (check, save, class name)
LAYOUTS = {
    "t5": (check_t5_compatible, save_hf_t5, "T5ForConditionalGeneration"),
    "switch_transformers": (check_switch_compatible, save_hf_switch, "SwitchTransformersForConditionalGeneration"),
    "marian": (check_marian_compatible, save_hf_marian, "MarianMTModel"),
    "pegasus": (check_pegasus_compatible, save_hf_pegasus, "PegasusForConditionalGeneration"),
    "bart": (check_bart_compatible, save_hf_bart, "BartForConditionalGeneration"),
    "mbart": (check_mbart_compatible, save_hf_mbart, "MBartForConditionalGeneration"),
}
# (position, norm_position) -> the layout of that family; relative positions choose by their experts
BART_FAMILY = {
    ("sinusoidal", "post"): "marian",
    ("sinusoidal", "pre"): "pegasus",
    ("learned", "post"): "bart",
    ("learned", "pre"): "mbart",
}
EXPORTABLE = "the transformer, t5 and t5-v1.1 presets export as they are, with norm_position pre or post"
# files an earlier export or checkpoint may have left that transformers would read instead of, or beside, ours
STALE_FILES = (
    "special_tokens_map.json",
    "added_tokens.json",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "tokenizer.model",
    "spiece.model",
)
# what an export (or a Hugging Face tokenizer's save_pretrained) writes: force replaces a directory of only these
EXPORT_NAMES = {
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "sentencepiece.bpe.model",
    "source.spm",
    "target.spm",
    "chat_template.jinja",
    *STALE_FILES,
}
LOAD_HINT = "encdec.from_pretrained(RUN_DIR) loads it"


def check_export_out(out: Path, force: bool, writes=None, kind: str = "export") -> None:
    """Refuse an output directory that is a file, an unsafe place (safe_paths.refuse_unsafe_output), not
    empty without `force`, or, with it, holding anything `writes(path)` says no `kind` writes (default: a
    directory or a file no export writes)."""
    writes = writes or (lambda path: not path.is_dir() and _export_file(path.name))
    output_path(out, "--out")
    refuse_unsafe_output(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"the output directory {out} is a file")
    present = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if present and not force:
        raise ConfigError(f"the output directory {out} exists and is not empty; choose another or pass --force")
    foreign = [name for name in present if not writes(out / name)]
    if foreign:
        raise ConfigError(
            f"the output directory {out} holds {foreign[0]!r}, which no {kind} writes; --force replaces only "
            f"an earlier {kind}, so choose another directory"
        )


def _export_file(name: str) -> bool:
    """Whether an export writes `name`, or left it behind when killed (a temporary of safe_paths)."""
    return name in EXPORT_NAMES or name.startswith(".staged.") or (name.startswith(".") and name.endswith(".tmp"))


def hf_layout(cfg: ModelConfig) -> str:
    """The Hugging Face model_type `cfg` exports as; ConfigError naming why when it has none."""
    if cfg.family != "encoder_decoder":
        raise ConfigError(f"the {cfg.family} family has no Hugging Face counterpart to export to; {LOAD_HINT}")
    if cfg.position == "rope":
        raise ConfigError(f"RoPE positions (ROT5) have no Hugging Face encoder-decoder counterpart; {LOAD_HINT}")
    if cfg.position == "relative":
        layout = "switch_transformers" if cfg.n_experts > 1 else "t5"
    else:
        layout = BART_FAMILY[cfg.position, cfg.norm_position]
    try:
        LAYOUTS[layout][0](cfg)
    except ConfigError as error:
        raise ConfigError(f"{error} ({EXPORTABLE}); {LOAD_HINT}") from None
    return layout


def export_hf(
    model: nn.Module, tokenizer: Tokenizer, out: str | Path, generation: dict | None = None, force: bool = False
) -> str:
    """Write `model`, `tokenizer` and `generation` defaults into `out` as a Hugging Face directory.

    Returns the Hugging Face class name. `out` must be empty or absent unless `force`,
    which replaces an earlier export there. Nothing is written when a check fails.
    """
    out = Path(out)
    cfg = model.config
    layout = hf_layout(cfg)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ConfigError(f"the tokenizer has {tokenizer.vocab_size} ids but the model embeds only {cfg.vocab_size}")
    check_export_out(out, force)
    files = convert_tokenizer(tokenizer)
    output_dir(out, "--out")
    for name in STALE_FILES:
        if (out / name).is_file():
            (out / name).unlink()
    files.save(out)
    LAYOUTS[layout][1](model, out)
    write_generation_config(out, cfg, tokenizer, generation or {})
    if layout in ("t5", "switch_transformers") and cfg.decoder_layers > cfg.n_encoder_layers:
        log.warning(
            "the decoder is deeper than the encoder: transformers' generate() sizes its cache by the "
            "encoder (num_layers) and fails; its forward() is unaffected"
        )
    return LAYOUTS[layout][2]
