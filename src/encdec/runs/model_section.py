"""A run config's model section, read once into the ModelConfig it describes (`ModelSection`): what a run config
holds, what a checkpoint from before model.json is read by (runs/description.py), and what a teacher's or an
adaptation source's section is read as.

    model: {preset: rot5-tiny, d_model: 256}     a preset and/or any ModelConfig field; the vocabulary size
                                                 and special ids are the tokenizer's where it sets none
    model: {experts: {count: 8}}                 a spec's fields (models/config_specs.py); the flat names
                                                 written before the specs (n_experts: 8) are read through
                                                 its MOVED table, and held in their places

The section is built when it is read, with stand-ins for what the tokenizer decides later
(PROVISIONAL_TOKENS); `ModelSection.build` gives the tokenizer's vocabulary size and special ids to the fields
the section does not set, without reading the section again. A fine-tuning run's section is an overlay (its keys
on top of the pretrained model's), only type-checked until `over` puts it on the pretrained one. Old YAML configs
and the config.yaml of old checkpoints hold the same mapping, read the same way.
"""

import collections.abc
import dataclasses
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from encdec.errors import ConfigError, suggestion
from encdec.models import ModelConfig, check_fields, preset, preset_names
from encdec.models.config_specs import moved_to_specs, overlaid
from encdec.schema import short, value_of

# Stand-ins for what the tokenizer decides later, so a model section is checked when it loads:
# a vocabulary no tokenizer exceeds and the usual special ids (a section's own values win).
PROVISIONAL_TOKENS = {"vocab_size": 1 << 24, "pad_id": 0, "eos_id": 1, "decoder_start_id": 0}


class ModelSection(collections.abc.Mapping):
    """A model section as written (a mapping: `section["d_model"]`, `dict(section)`) and, unless it is an
    overlay, the ModelConfig it builds with PROVISIONAL_TOKENS (`config`), built and checked once, here. An
    unknown key or preset, a value of the wrong type or out of range, or settings that contradict each other
    (n_kv_heads not dividing n_heads, a field its family ignores) are refused here, in one sentence."""

    def __init__(self, written: Mapping[str, Any] | None = None, overlay: bool = False):
        self.written = moved_to_specs(written or {})  # flat keys from before the specs in their places
        check_section_keys(self.written)
        self.config = None if overlay else build_model_config(self.written, **PROVISIONAL_TOKENS)
        if self.config is not None:
            check_fields(self.config)  # a field its family ignores is refused

    def __getitem__(self, key: str) -> Any:
        return self.written[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.written)

    def __len__(self) -> int:
        return len(self.written)

    def __repr__(self) -> str:
        return f"ModelSection({self.written!r}{', overlay=True' if self.config is None else ''})"

    @property
    def family(self) -> str:
        """The family the section builds: its config's; for an overlay, its own key, else its preset's, else the
        default."""
        return self.config.family if self.config is not None else model_family(self.written)

    def over(self, base: Mapping[str, Any]) -> "ModelSection":
        """This section's keys on top of `base` (a pretrained model's section), built; a spec's keys on top of
        the base's spec (`experts: {top_k: 2}` keeps the base's count)."""
        return ModelSection(overlaid(base, self.written))

    def build(self, vocab_size: int, pad_id: int, eos_id: int, decoder_start_id: int) -> ModelConfig:
        """The ModelConfig for a tokenizer: the built config with the tokenizer's vocabulary size and special ids
        in the fields the section does not set itself (the same config a build with them would give)."""
        if self.config is None:
            raise ConfigError("model: a fine-tuning run's section is built on the pretrained model's (over)")
        tokens = {"vocab_size": vocab_size, "pad_id": pad_id, "eos_id": eos_id, "decoder_start_id": decoder_start_id}
        try:
            return dataclasses.replace(self.config, **{k: v for k, v in tokens.items() if k not in self.written})
        except ConfigError as error:
            raise ConfigError(model_error(error)) from None


def check_section_keys(section: dict) -> None:
    """Each key of a model section known (`preset` or a ModelConfig field) and its value of the declared type."""
    hints = typing.get_type_hints(ModelConfig, include_extras=True)
    for key, value in section.items():
        if key == "preset":
            value_of(str, value, "model.preset")
        elif key not in hints:
            raise ConfigError(f"unknown key model.{short(key)[1:-1]}{suggestion(key, ['preset', *hints])}")
        else:
            value_of(hints[key], value, f"model.{key}")


def model_family(section: Mapping) -> str:
    """The family a model section builds: its own key, else its preset's, else the default."""
    if "family" in section:
        return section["family"]
    name = section.get("preset")
    if name in preset_names():
        return preset(name, **PROVISIONAL_TOKENS).family
    return ModelConfig.family


def build_model_config(
    section: Mapping, vocab_size: int, pad_id: int, eos_id: int, decoder_start_id: int
) -> ModelConfig:
    """The ModelConfig a model section describes; token ids default to the tokenizer's."""
    values = {"vocab_size": vocab_size, "pad_id": pad_id, "eos_id": eos_id, "decoder_start_id": decoder_start_id}
    values.update({k: v for k, v in section.items() if k != "preset"})
    name = section.get("preset")
    if name is not None and name not in preset_names():
        raise ConfigError(f"model.preset {short(name)} is unknown{suggestion(name, preset_names(), 'presets')}")
    try:
        return preset(name, **values) if name is not None else ModelConfig.from_dict(values)
    except ConfigError as error:
        raise ConfigError(model_error(error)) from None


def model_error(error: ConfigError) -> str:
    """A model config's refusal, naming the model section where it does not already."""
    message = str(error)
    return message if "model." in message else f"model: {message}"
