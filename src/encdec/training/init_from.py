"""Where fine-tuning starts (`training.init_from`): another encdec run or a Hugging Face checkpoint.

    init_from: runs/main               an encdec run: its best (else latest) checkpoint
    init_from: checkpoints/flan-t5-small   a local Hugging Face directory: T5, Flan-T5, mT5, BART, Marian
    init_from: google/flan-t5-small        a Hub id (org/name[@revision]), fetched into the Hub cache

Either way the model section, the weights, the tokenizer and the generation defaults
come from there; the fine-tuning config's own model keys (dropout, say) go on top, and
the merged section is what the new run saves, so it is self-contained. A key that would change
the shape of a weight the source gives (d_model, n_heads, a family) is one sentence before anything
is written (`check_weights_fit`). Which kind a path
is, is encdec.runs' decision (`model_kind`).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from encdec.errors import CheckpointError, ConfigError
from encdec.generation.whisper_rules import whisper_rules_of
from encdec.interop import load_hf
from encdec.interop.hub_ids import resolve_model
from encdec.models import ModelConfig
from encdec.models.parameter_count import meta_model, weight_shapes
from encdec.runs.checkpoint import load_state, load_weights
from encdec.runs.description import read_model_config
from encdec.runs.load import read_generation
from encdec.runs.model_section import PROVISIONAL_TOKENS, ModelSection
from encdec.runs.open import model_kind
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.schema import short
from encdec.training.adaptation import adapted_weights, matched
from encdec.training.run_config import saved_config
from encdec.training.same_run import flatten

log = logging.getLogger(__name__)


@dataclass
class Pretrained:
    """What a fine-tuning run takes from its starting point."""

    source: Path  # the checkpoint directory of a run, or the Hugging Face directory
    kind: str  # "run" or "hf"
    model_section: dict[str, Any]
    tokenizer_dir: Path
    weights: dict[str, torch.Tensor] = field(repr=False)
    generation: dict[str, Any] = field(default_factory=dict)
    adapted: bool = False  # a decoder-only model's weights, for an encoder-decoder (training.adaptation)
    decoder: "Pretrained | None" = None  # an unbalanced adaptation's decoder source (training.init_decoder_from)
    # the vocabulary size and special ids its model was built with, where its section sets none (a run's
    # tokenizer decided them: its model.json says them; stand-ins for a checkpoint from before model.json)
    tokens: dict[str, int] = field(default_factory=lambda: dict(PROVISIONAL_TOKENS))


def load_pretrained(name: str, label: str = "training.init_from ") -> Pretrained:
    """The model `name` names (training.init_from's starting point, training.distill's teacher); one sentence
    (CheckpointError) starting with `label` if it is neither kind."""
    path = resolve_model(name, label)
    kind = model_kind(path, label)
    if kind == "checkpoint":  # the pointers a run keeps to what it started from name a run's checkpoints
        raise CheckpointError(
            f"{label}{path} is a checkpoint directory on its own; name the run directory it belongs to, or export "
            "it as a Hugging Face directory (encdec export) and name that"
        )
    if kind == "hf":
        model = load_hf(path)
        weights = model.state_dict()
        rules = whisper_rules_of(model.hf_generation)  # a Whisper's decoding rules, which its runs decode by
        generation = model.generation_defaults | ({"whisper": rules.as_json()} if rules is not None else {})
        return Pretrained(path, "hf", model_section(model.config), path, weights, generation)
    return from_checkpoint(RunDir(path).checkpoint("best"))  # the latest where no best was kept


def from_checkpoint(checkpoint: CheckpointDir) -> Pretrained:
    """What one checkpoint of a run holds, as a starting point."""
    section = saved_config(checkpoint).model
    weights = load_weights(checkpoint.model)
    tokens = dict(PROVISIONAL_TOKENS)
    if checkpoint.model_config.exists():
        built = read_model_config(checkpoint)
        tokens = {key: getattr(built, key) for key in tokens}
    generation = read_generation(checkpoint)
    return Pretrained(checkpoint.path, "run", section, checkpoint.tokenizer, weights, generation, tokens=tokens)


def model_section(cfg: ModelConfig) -> dict[str, Any]:
    """A run config's model section that rebuilds `cfg` exactly (every field but default research options)."""
    section = cfg.to_dict()
    if section["research"] == ModelConfig().to_dict()["research"]:
        del section["research"]
    return section


def check_weights_fit(section: ModelSection, pretrained: Pretrained) -> None:
    """ConfigError (one sentence) where the fine-tuning run's model `section` (its keys over the source's)
    changes the shape of any of the weights the source gives it, so that they would not load: the model it builds
    is built on the meta device (shapes without storage) and compared with the source's, and the first setting
    whose own change alters a shape is named with both values. Keys that change no shape (dropout, norms.eps) are
    the run's to set. An adaptation's source is its encoder-decoder section, its weights matched one by one."""
    source = ModelSection(pretrained.model_section).build(**pretrained.tokens)
    fits = partial(adaptable, pretrained) if pretrained.adapted else partial(same_shapes, weight_shapes(source))
    asked = section.build(**pretrained.tokens)
    if fits(asked):
        return
    theirs, ours = flatten(source.to_dict()), flatten(asked.to_dict())
    differ = [key for key in {**ours, **theirs} if ours.get(key) != theirs.get(key)]
    if not differ:  # the source's own model does not fit its weights: its loading says where
        return
    key = next((key for key in differ if reshapes_alone(source, key, ours.get(key), fits)), differ[0])
    raise ConfigError(
        f"model.{key} {short(ours.get(key))} contradicts training.init_from's model ({key} "
        f"{short(theirs.get(key))}): its weights would not fit; drop the key or train from scratch"
    )


def same_shapes(shapes: dict[str, tuple[int, ...]], cfg: ModelConfig) -> bool:
    """Whether the model `cfg` describes holds weights of exactly `shapes`."""
    return weight_shapes(cfg) == shapes


def adaptable(pretrained: Pretrained, cfg: ModelConfig) -> bool:
    """Whether every weight of the encoder-decoder `cfg` describes has one of its shape to start from in the
    adapted decoder-only models (adaptation.matched)."""
    decoder, target = pretrained.decoder, meta_model(cfg).state_dict()
    try:
        matched(target, pretrained.weights, decoder.weights if decoder else None)
    except ConfigError:
        return False
    return True


def reshapes_alone(cfg: ModelConfig, key: str, value: Any, fits: Callable[[ModelConfig], bool]) -> bool:
    """Whether `cfg` with the setting `key` (dotted: "positions.max") set to `value` alone is a model whose weights
    do not fit (`fits`); False where that change alone is no model its family builds."""
    values = cfg.to_dict()
    *spec, name = key.split(".")
    inner = values
    for part in spec:
        inner = inner[part]
    inner[name] = value
    try:
        return not fits(ModelConfig.from_dict(values))
    except ConfigError:
        return False


def load_pretrained_weights(model: nn.Module, pretrained: Pretrained) -> dict[str, Any] | None:
    """The pretrained weights into `model`; for an adapted decoder-only model, through `adapted_weights`, whose
    record of what came from where (training/adaptation.py's adaptation.json) it returns."""
    what = "Hugging Face checkpoint" if pretrained.kind == "hf" else "run"
    record = None
    weights = pretrained.weights
    if pretrained.adapted:
        decoder = pretrained.decoder
        weights, copied, fresh = adapted_weights(model.state_dict(), weights, decoder.weights if decoder else None)
        record = {"source": str(pretrained.source), "copied": copied, "fresh": fresh}
        if decoder is not None:
            record["decoder_source"] = str(decoder.source)
    load_state(model, weights, f"the model section does not match the pretrained {what} {pretrained.source}")
    log.info("initialised from %s", pretrained.source)
    return record
