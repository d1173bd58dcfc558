"""A resumed run is the same run: its config is compared with the one its checkpoint saved.

Only the keys in SAFE may change on resume: how long to train, how often to evaluate,
log and save, and where and how fast to compute. Any other difference (lr, batch
size, data, tokenizer, model) would silently continue a different experiment, so it
is refused with the differing keys listed, unless the user accepts the changes
(`encdec train --resume --accept-changes`), which the run then records in
metrics.jsonl as a `config_change` record.
"""

import dataclasses
from dataclasses import replace

from encdec.errors import ConfigError, Unmet
from encdec.runs.model_section import ModelSection
from encdec.schema import short
from encdec.training.run_config import RunConfig, TokenizerSection

SAFE = frozenset(
    {
        "training.steps",
        "training.max_time",
        "training.threads",
        "training.data_workers",
        "training.device",
        "training.compile",
        "training.peak_tflops",
        "evaluation.interval",
        "evaluation.interval_time",
        "evaluation.steps",
        "evaluation.generate",
        "output.log_interval",
        "output.save_interval",
        "output.save_interval_time",
        "output.keep_last",
        "output.plot",
    }
)


def resumed_config(cfg: RunConfig, saved: RunConfig, accept_changes: bool) -> tuple[RunConfig, dict]:
    """The config to resume with and the changes against `saved` ({key: [old, new]}, safe keys included).

    A fine-tuning run saved its merged model section (the pretrained one with its own keys on
    top), so the same merge is made here before comparing.
    """
    if cfg.training.init_from:
        cfg = replace(cfg, model=decided_by_source(cfg)[0].model.over(saved.model), tokenizer=saved.tokenizer)
    changes = differences(comparable(saved), comparable(cfg))
    unsafe = {key: change for key, change in changes.items() if key not in SAFE}
    if unsafe and not accept_changes:
        raise Unmet(
            "the config differs from the one this run was trained with ({unmet}); resume with the same config, "
            "or pass --accept-changes to continue with these changes",
            [f"{key} {short(old, 30)} -> {short(new, 30)}" for key, (old, new) in unsafe.items()],
        )
    return cfg, changes


def comparable(cfg: RunConfig) -> dict:
    """The config's keys flattened, with the model section as the ModelConfig it builds: a key set to
    its default (or to its preset's value) is the same model, not a change."""
    values = cfg.to_dict()
    try:  # a fine-tuning run's saved section is its merged one, held as written: built here to compare
        model = cfg.model if cfg.model.config is not None else ModelSection(cfg.model)
        values["model"] = dataclasses.asdict(model.config)
    except ConfigError:  # a saved section this version cannot build: compared as written
        pass
    return flatten(values)


def flatten(values: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; the model section's keys are flattened the same way."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def differences(old: dict, new: dict) -> dict:
    return {key: [old.get(key), new.get(key)] for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)}


def decided_by_source(cfg: RunConfig) -> tuple[RunConfig, list[str]]:
    """`cfg` without what training.init_from's model decides in its place, and what those were: a preset (the
    architecture is the source's; the model section's other keys go on top of it) and a tokenizer section (the
    source's own tokenizer is read)."""
    replaced = []
    if "preset" in cfg.model:
        replaced.append(f"model.preset {cfg.model['preset']} (its architecture is the source's)")
        cfg = replace(cfg, model=ModelSection({k: v for k, v in cfg.model.items() if k != "preset"}, overlay=True))
    if cfg.tokenizer != TokenizerSection():
        replaced.append(f"tokenizer kind {cfg.tokenizer.kind} (its own tokenizer is read)")
        cfg = replace(cfg, tokenizer=TokenizerSection())
    return cfg, replaced
