"""The registry: every Hugging Face family encdec reads and writes, what `load_hf`, `export_hf`, peft's names,
the refusals that name config.json's keys and the files an export may replace all read.

A family is the model_type of a config.json, declared by its folder (interop/<family>/__init__.py's FAMILIES:
interop.family.Family): its loader and config reading, its check and writer, which of our layouts it is written
for, its weight names, the config.json keys our fields are read from, its tokenizer files and the transformers
class it exports to. A folder is made known by its line in NAMES. Each is read into one of encdec's model families
(`model_family`): the sequence-to-sequence ones into the encoder-decoder, Gemma 2, Gemma 3's text model, Llama,
Qwen2 and Qwen3 into the decoder-only family, Whisper into the whisper family; a model is written only as a family of its own model family, the
first of the registry's order whose `writes` holds.
"""

from importlib import import_module

from encdec.errors import ConfigError
from encdec.interop.family import Family
from encdec.models import ModelConfig

# One line a family folder (interop/<name>/), in the order a model is matched to the family it is written as
NAMES = (
    "t5",
    "mt5",  # mT5, UMT5
    "longt5",
    "switch",
    "marian",
    "pegasus",
    "blenderbot",  # asked before mBART: mBART's layout with positions from 0 and no embedding norm
    "blenderbot_small",  # asked before BART: its layout with the decoder's embedding norm before its positions
    "bart",  # BART, mBART
    "plbart",  # BART's layout, written for a model read from PLBart (hf_model_type)
    "mvp",  # the same, read from MVP
    "nllb_moe",  # asked before M2M100: its layout with experts
    "fsmt",  # asked before M2M100: fairseq's positions, post-norm, a source vocabulary of its own
    "led",  # BART's layout with Longformer's local and global attention in the encoder
    "m2m100",  # M2M100, NLLB
    "t5gemma",
    "t5gemma2",
    "whisper",  # the whisper family's one layout: BART's names, pre-norm, a convolutional stem over log-mels
    # decoder-only: a decoder_only model exports as Gemma 3 with Gemma's RMSNorm and qk_norm, Gemma 2 with Gemma's
    # RMSNorm alone; else as Qwen3 with qk_norm, Qwen2 with q, k and v biases, else Llama
    "gemma",  # Gemma 2, Gemma 3's text model
    "llama",  # Llama, Qwen2, Qwen3
)
FOLDERS = tuple(import_module(f"encdec.interop.{name}") for name in NAMES)
FAMILIES: dict[str, Family] = {family.model_type: family for folder in FOLDERS for family in folder.FAMILIES}


def family_for(cfg: ModelConfig) -> Family | None:
    """The family a model of `cfg`'s layout is written as (None: no Hugging Face family has its layout), among
    those of its model family; one read from a family whose layout another shares (mT5's, T5 v1.1's) is written
    as the family it names."""
    if cfg.hf_model_type is not None:
        if cfg.hf_model_type not in FAMILIES:
            raise ConfigError(f"model.hf_model_type {cfg.hf_model_type!r} is not a Hugging Face family encdec writes")
        return FAMILIES[cfg.hf_model_type]
    ours = (family for family in FAMILIES.values() if family.model_family == cfg.family)
    return next((family for family in ours if family.writes(cfg)), None)
