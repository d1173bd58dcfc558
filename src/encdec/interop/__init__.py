"""Hugging Face's checkpoints read into encdec models, and encdec models written as Hugging Face directories.

families.py           one entry per Hugging Face family (T5, Marian, ..., Gemma, Llama, Qwen): its loader,
                      its writer and the layout it is written for, its config.json key names, its tokenizer files
from_hf.py            load_hf: a local directory of a family -> an encdec model
to_hf.py              export_hf: an encdec model and tokenizer -> a directory transformers loads
generation_config.py  the generation defaults both sides carry
hf_*.py               one file per Hugging Face architecture: its names, its config, its checks
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
