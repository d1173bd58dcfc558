"""Hugging Face's checkpoints read into encdec models, and encdec models written as Hugging Face directories.

<family>/             one folder per Hugging Face family (bart/, marian/, ...): its config.json read and
                      written, its weight names (one NameMap), its refusals, tokenizer files and transformers class
families.py           the registry: one line per family folder
family.py             what a folder declares (Family, NameMap) and the config pieces folders share
checkpoint_files.py   a model directory's weights read, filled by name, and written, whatever the family
from_hf.py            load_hf: a local directory of a family -> an encdec model
to_hf.py              export_hf: an encdec model and tokenizer -> a directory transformers loads
peft_adapter.py       LoRA adapters written under the family's module names
generation_config.py  the generation defaults both sides carry
"""

from pathlib import Path

from torch import nn

from encdec.interop.families import FAMILIES
from encdec.interop.from_hf import is_hf_dir, load_hf
from encdec.interop.to_hf import export_hf


def save_hf(model: nn.Module, path: str | Path) -> None:
    """Write a T5-family encdec model as a Hugging Face T5ForConditionalGeneration directory."""
    FAMILIES["t5"].save(model, Path(path))


__all__ = ["export_hf", "is_hf_dir", "load_hf", "save_hf"]
