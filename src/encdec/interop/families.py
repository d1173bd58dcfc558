"""Every Hugging Face family encdec reads and writes, one entry each: what `load_hf`, `export_hf`, the
refusals that name config.json's keys and the files an export may replace all read.

A family is the model_type of a config.json: its loader (directory -> model), its check and writer (model
-> directory), which of our layouts it is written for, the config.json keys our ModelConfig fields are read
from where the names differ, and the tokenizer files its checkpoints ship. A new family (mT5, UMT5, NLLB,
...) is one entry here and its hf_*.py module of names and config mapping.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from encdec.interop.hf_bart import (
    BART_KEYS,
    check_bart_compatible,
    check_mbart_compatible,
    load_hf_bart,
    load_hf_mbart,
    save_hf_bart,
    save_hf_mbart,
)
from encdec.interop.hf_marian import check_marian_compatible, load_hf_marian, save_hf_marian
from encdec.interop.hf_pegasus import check_pegasus_compatible, load_hf_pegasus, save_hf_pegasus
from encdec.interop.hf_switch import check_switch_compatible, load_hf_switch, save_hf_switch
from encdec.interop.hf_t5 import T5_KEYS, check_t5_compatible, load_hf_t5, save_hf_t5
from encdec.models import EncoderDecoder, ModelConfig

IDS = {"pad_id": "pad_token_id", "eos_id": "eos_token_id", "decoder_start_id": "decoder_start_token_id"}


@dataclass(frozen=True)
class Family:
    model_type: str  # config.json's model_type
    hf_class: str  # the transformers class an export loads as
    load: Callable[[Path, dict], EncoderDecoder]  # (directory, its config.json) -> our model, weights filled
    check: Callable[[ModelConfig], None]  # ConfigError naming what keeps a config from this layout
    save: Callable[[EncoderDecoder, Path], None]  # our model -> config.json and model.safetensors
    writes: Callable[[ModelConfig], bool]  # whether a model of this layout exports as this family
    keys: dict[str, str]  # ModelConfig field -> the config.json key it is read from, where the names differ
    tokenizer_files: tuple[str, ...]  # the tokenizer files its checkpoints ship beside tokenizer.json


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family(
            "t5",
            "T5ForConditionalGeneration",
            load_hf_t5,
            check_t5_compatible,
            save_hf_t5,
            lambda cfg: cfg.position == "relative" and cfg.n_experts == 1,
            T5_KEYS | IDS,
            ("spiece.model",),
        ),
        Family(
            "switch_transformers",
            "SwitchTransformersForConditionalGeneration",
            load_hf_switch,
            check_switch_compatible,
            save_hf_switch,
            lambda cfg: cfg.position == "relative" and cfg.n_experts > 1,
            T5_KEYS | IDS,
            ("spiece.model",),
        ),
        Family(
            "marian",
            "MarianMTModel",
            load_hf_marian,
            check_marian_compatible,
            save_hf_marian,
            lambda cfg: cfg.position == "sinusoidal" and cfg.norm_position == "post",
            BART_KEYS | IDS,
            ("source.spm", "target.spm", "vocab.json"),
        ),
        Family(
            "pegasus",
            "PegasusForConditionalGeneration",
            load_hf_pegasus,
            check_pegasus_compatible,
            save_hf_pegasus,
            lambda cfg: cfg.position == "sinusoidal" and cfg.norm_position == "pre",
            BART_KEYS | IDS,
            ("spiece.model",),
        ),
        Family(
            "bart",
            "BartForConditionalGeneration",
            load_hf_bart,
            check_bart_compatible,
            save_hf_bart,
            lambda cfg: cfg.position == "learned" and cfg.norm_position == "post",
            BART_KEYS | IDS,
            ("vocab.json", "merges.txt"),
        ),
        Family(
            "mbart",
            "MBartForConditionalGeneration",
            load_hf_mbart,
            check_mbart_compatible,
            save_hf_mbart,
            lambda cfg: cfg.position == "learned" and cfg.norm_position == "pre",
            BART_KEYS | IDS,
            ("sentencepiece.bpe.model",),
        ),
    )
}


def family_for(cfg: ModelConfig) -> Family | None:
    """The family a model of `cfg`'s layout is written as (None: no Hugging Face family has its layout)."""
    return next((family for family in FAMILIES.values() if family.writes(cfg)), None)
