"""An encdec model and its tokenizer as a Hugging Face directory AutoModelForSeq2SeqLM (AutoModelForCausalLM for
the decoder-only family) and AutoTokenizer load.

Each encoder-decoder layout goes to the Hugging Face class that computes the same logits, the first family of
the registry (interop.families) whose `writes` holds:
    relative bias, dense feed-forward    T5ForConditionalGeneration (v1.0 tied and scaled, v1.1 untied), or
                                         MT5ForConditionalGeneration for a model read from mT5 (hf_model_type)
    relative bias in every layer         UMT5ForConditionalGeneration
    relative bias, mixture of experts    SwitchTransformersForConditionalGeneration (top-1, raw gates)
    sinusoidal positions, post-norm      MarianMTModel (the canonical Transformer, dimensions reordered)
    sinusoidal positions, pre-norm       PegasusForConditionalGeneration (likewise)
    learned positions, embedding norm    BartForConditionalGeneration (post-norm), MBartForConditionalGeneration (pre)
    learned positions from 0, pre-norm   BlenderbotForConditionalGeneration
    fairseq's sinusoids, pre-norm        M2M100ForConditionalGeneration (M2M100, NLLB)
    RoPE with Gemma's RMSNorm            T5GemmaForConditionalGeneration (T5Gemma)
    decoder-only, RoPE, RMSNorm, SwiGLU  LlamaForCausalLM, Qwen2ForCausalLM (q, k, v biases), Qwen3ForCausalLM
                                         (each head's queries and keys normed)
    decoder-only with Gemma's RMSNorm    Gemma2ForCausalLM, Gemma3ForCausalLM (each head's queries and keys normed)
Other RoPE models (ROT5), the research families and the RNN have no Hugging Face counterpart and are
refused; `encdec.from_pretrained(RUN_DIR)` loads them. Every check runs before a file is written.
The output directory must be new, empty or (with force) an earlier export: a directory holding
anything else is refused, and every file is written anew and renamed into place, so a link
planted there is replaced rather than written through.

    out/config.json, model.safetensors   the model (its family's writer: interop.families)
    out/generation_config.json           decoder start, EOS, pad and the run's generation defaults
    out/tokenizer.json, tokenizer_config.json   the tokenizer (hf_tokenizer)
"""

import logging
from pathlib import Path

from torch import nn

from encdec.errors import ConfigError, Unmet, listed
from encdec.interop.families import FAMILIES, family_for
from encdec.interop.family import Family
from encdec.interop.generation_config import write_generation_config
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.models import ModelConfig
from encdec.models.model_config import ENCODER_WIDTHS
from encdec.safe_paths import output_dir, output_path, refuse_unsafe_output
from encdec.tokenizers import Tokenizer

log = logging.getLogger(__name__)

EXPORTABLE = {  # what exports, said beside a refusal, by model family (short: the refusal's list goes first)
    "encoder_decoder": "the transformer, t5 and t5-v1.1 presets export as they are, pre- or post-norm",
    "decoder_only": (
        "decoder_only exports as Llama (rope, rmsnorm, swiglu) or Gemma (gemma_rmsnorm, post_norms, gated_gelu)"
    ),
    "whisper": "whisper exports as Whisper: pre-norm layernorm, biases but the keys' (attention.bias qvo), gelu",
}
# files an earlier export or checkpoint may have left that transformers would read instead of, or beside, ours
STALE_FILES = (
    "special_tokens_map.json",
    "added_tokens.json",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "tokenizer.model",
    "spiece.model",
)
# what an export (or a Hugging Face tokenizer's save_pretrained: a family's own files) writes: force replaces a
# directory of only these
EXPORT_NAMES = {
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "chat_template.jinja",
    *(name for family in FAMILIES.values() for name in family.tokenizer_files),
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
    if cfg.family not in EXPORTABLE:
        raise ConfigError(f"the {cfg.family} family has no Hugging Face counterpart to export to; {LOAD_HINT}")
    if cfg.attention.kinds:  # encdec's own attention kinds, by name: no Hugging Face layout holds them
        named = listed(list(cfg.attention.kinds))
        raise ConfigError(f"model.attention.kinds ({named}) has no Hugging Face family to write it; {LOAD_HINT}")
    family = family_for(cfg)
    for nearest in FAMILIES.values() if family is None else ():  # the one family of a kind (T5Gemma's RoPE)
        said = nearest.only_counterpart(cfg)
        try:
            if said:
                nearest.check(cfg)
        except Unmet as error:
            raise error.reworded(said + ", whose layout this one lacks ({unmet}); " + LOAD_HINT) from None
    if family is None:
        raise ConfigError(
            f"no Hugging Face family has {cfg.positions.kind} positions with {cfg.norms.position}-norm; {LOAD_HINT}"
        )
    try:
        family.check(cfg)
    except Unmet as error:
        raise error.reworded(f"{{said}} ({EXPORTABLE[cfg.family]}); {LOAD_HINT}") from None
    except ConfigError as error:
        raise ConfigError(f"{error} ({EXPORTABLE[cfg.family]}); {LOAD_HINT}") from None
    check_own_encoder(cfg, family)
    return family.model_type


def check_own_encoder(cfg: ModelConfig, family: Family) -> None:
    """One sentence where `cfg`'s encoder has widths or a vocabulary of its own (model.encoder) that `family`'s
    layout, holding one of each for both stacks, cannot write; naming the families that hold them."""
    own_widths = any(getattr(cfg.encoder, key) is not None for key in ENCODER_WIDTHS)
    for own, holds, what in (
        (own_widths, "encoder_widths", "widths (model.encoder_*)"),
        (cfg.source_vocab_size != cfg.vocab_size, "source_vocabulary", "vocabulary (model.encoder.vocab_size)"),
    ):
        if own and not getattr(family, holds):
            holders = " and ".join(f.model_type for f in FAMILIES.values() if getattr(f, holds))
            where = f"{holders}'s layout alone holds one" if holders else "no Hugging Face layout encdec writes has one"
            raise ConfigError(
                f"an encoder of its own {what} has no Hugging Face {family.model_type} counterpart; {where}; "
                + LOAD_HINT
            )


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
    if tokenizer.vocab_size > cfg.source_vocab_size:  # the ids it encodes are the encoder's (FSMT's source's)
        raise ConfigError(
            f"the tokenizer has {tokenizer.vocab_size} ids but the model embeds only {cfg.source_vocab_size}"
        )
    check_export_out(out, force)
    files = convert_tokenizer(tokenizer)
    output_dir(out, "--out")
    for name in STALE_FILES:
        if (out / name).is_file():
            (out / name).unlink()
    files.save(out)
    FAMILIES[layout].save(model, out)
    write_generation_config(out, cfg, tokenizer, generation or {}, getattr(model, "hf_generation", None))
    note = FAMILIES[layout].note(cfg)
    if note:
        log.warning(note)
    return FAMILIES[layout].hf_class
