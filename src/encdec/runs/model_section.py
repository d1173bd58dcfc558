"""A run config's model section made the ModelConfig it describes: what a checkpoint from before model.json
is read by (runs/description.py), and what the training config checks its model section with.

    model: {preset: rot5-tiny, d_model: 256}     a preset and/or any ModelConfig field; the vocabulary size
                                                 and special ids are the tokenizer's where it sets none
"""

import typing

from encdec.errors import ConfigError, suggestion
from encdec.models import ModelConfig, check_fields, preset, preset_names
from encdec.schema import short, value_of

# Stand-ins for what the tokenizer decides later, so a model section is checked when it loads:
# a vocabulary no tokenizer exceeds and the usual special ids (a section's own values win).
PROVISIONAL_TOKENS = {"vocab_size": 1 << 24, "pad_id": 0, "eos_id": 1, "decoder_start_id": 0}


def check_model_section(section: dict, overlay: bool = False) -> None:
    """Refuse a model section that cannot build a ModelConfig: an unknown key or preset, a value of
    the wrong type or out of range, or settings that contradict each other (n_kv_heads not dividing
    n_heads, ...). The vocabulary and special ids are the tokenizer's, unknown until the data is
    read, so stand-ins take their place. An `overlay` (a fine-tuning run's keys on top of the
    pretrained model's section) is only type-checked here; the merged section is checked when built.
    """
    hints = typing.get_type_hints(ModelConfig, include_extras=True)
    for key, value in section.items():
        if key == "preset":
            value_of(str, value, "model.preset")
        elif key not in hints:
            raise ConfigError(f"unknown key model.{short(key)[1:-1]}{suggestion(key, ['preset', *hints])}")
        else:
            value_of(hints[key], value, f"model.{key}")
    if not overlay:
        check_fields(build_model_config(section, **PROVISIONAL_TOKENS))  # a field its family ignores is refused


def model_family(section: dict) -> str:
    """The family a model section builds: its own key, else its preset's, else the default."""
    if "family" in section:
        return section["family"]
    name = section.get("preset")
    if name in preset_names():
        return preset(name, **PROVISIONAL_TOKENS).family
    return ModelConfig.family


def build_model_config(section: dict, vocab_size: int, pad_id: int, eos_id: int, decoder_start_id: int) -> ModelConfig:
    """The ModelConfig the model section describes; token ids default to the tokenizer's."""
    values = {"vocab_size": vocab_size, "pad_id": pad_id, "eos_id": eos_id, "decoder_start_id": decoder_start_id}
    values.update({k: v for k, v in section.items() if k != "preset"})
    name = section.get("preset")
    if name is not None and name not in preset_names():
        raise ConfigError(f"model.preset {short(name)} is unknown{suggestion(name, preset_names(), 'presets')}")
    try:
        return preset(name, **values) if name is not None else ModelConfig.from_dict(values)
    except ConfigError as error:
        message = str(error)
        raise ConfigError(message if "model." in message else f"model: {message}") from None
