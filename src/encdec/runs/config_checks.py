"""Every value of a run config checked when it loads: finite, in range, the key named.

A run config that passes here cannot make the trainer write NaN checkpoints from an
infinite learning rate or fail minutes later on a template key. Each problem is one
sentence (ConfigError) naming the key and what it allows.
"""

import dataclasses
import math
import string
from collections.abc import Callable, Iterator
from typing import Any

from encdec.errors import ConfigError
from encdec.runs.typed_yaml import short

OPTIMIZERS = ("adamw", "adafactor", "adamw_scale")
METRICS = ("rouge1", "rouge2", "rougeL", "bleu", "chrf")
Check = tuple[str, Callable[[Any], bool], str]  # (dotted key, test, what the key allows)

RANGES: list[Check] = [
    ("optimizer.kind", lambda v: v in OPTIMIZERS, "one of " + ", ".join(OPTIMIZERS)),
    ("optimizer.lr", lambda v: v > 0, "positive"),
    ("optimizer.weight_decay", lambda v: v >= 0, "zero or more"),
    ("optimizer.eps", lambda v: v > 0, "positive"),
    ("optimizer.betas", lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two numbers in [0, 1)"),
    ("schedule.warmup_steps", lambda v: v is None or v >= 0, "zero or more"),
    ("schedule.warmup_fraction", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("schedule.min_lr", lambda v: v >= 0, "zero or more"),
    ("schedule.decay_steps", lambda v: v is None or v >= 1, "a positive integer"),
    ("training.steps", lambda v: v >= 1, "a positive integer"),
    ("training.batch_size", lambda v: v >= 1, "a positive integer"),
    ("training.grad_accum", lambda v: v >= 1, "a positive integer"),
    ("training.clip_norm", lambda v: v >= 0, "zero (off) or more"),
    ("training.label_smoothing", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("training.data_workers", lambda v: v is None or v >= 0, "zero or more"),
    ("training.threads", lambda v: v is None or v >= 1, "a positive integer"),
    ("training.peak_tflops", lambda v: v is None or v > 0, "positive"),
    ("evaluation.interval", lambda v: v >= 1, "a positive integer"),
    ("evaluation.steps", lambda v: v >= 1, "a positive integer"),
    ("evaluation.generate", lambda v: v >= 0, "zero or more"),
    ("evaluation.metric", lambda v: v in METRICS, "one of " + ", ".join(METRICS)),
    ("evaluation.max_new_tokens", lambda v: v >= 1, "a positive integer"),
    ("evaluation.num_beams", lambda v: v >= 1, "a positive integer"),
    ("output.best_by", lambda v: v in ("val_loss", "metric"), "val_loss or metric"),
    ("training.early_stopping_patience", lambda v: v >= 0, "zero (never) or more"),
    ("output.log_interval", lambda v: v >= 1, "a positive integer"),
    ("output.save_interval", lambda v: v >= 0, "zero (at every evaluation) or more"),
    ("output.keep_last", lambda v: v >= 1, "a positive integer"),
    ("data.val_fraction", lambda v: 0 < v < 1, "in (0, 1)"),
    ("data.max_documents", lambda v: v is None or v >= 1, "a positive integer"),
    ("tokenizer.vocab_size", lambda v: v >= 1, "a positive integer"),
    ("tokenizer.num_sentinels", lambda v: v >= 0, "zero or more"),
    ("objective.seq_len", lambda v: v >= 2, "at least 2"),
    ("objective.max_source_len", lambda v: v >= 1, "a positive integer"),
    ("objective.max_target_len", lambda v: v >= 1, "a positive integer"),
    ("objective.noise_density", lambda v: 0 < v < 1, "in (0, 1)"),
    ("objective.mean_span", lambda v: v >= 1, "at least 1"),
    (
        "objective.ul2_probabilities",
        lambda v: len(v) == 3 and all(p >= 0 for p in v) and sum(v) > 0,
        "three non-negative numbers (R, X, S) with a positive sum",
    ),
]

TEMPLATES = {"objective.source_template": "source", "objective.target_template": "target"}


def check_run_config(cfg: Any) -> None:
    """Raise ConfigError for the first value of `cfg` (a RunConfig, whose module imports this one) that is not
    finite or out of range."""
    for key, value in numbers(cfg):
        if not math.isfinite(value):
            raise ConfigError(f"{key} must be a finite number, got {value!r}")
    for key, ok, allowed in RANGES:
        value = lookup(cfg, key)
        if not ok(value):
            raise ConfigError(f"{key} must be {allowed}, got {short(value)}")
    if cfg.schedule.min_lr > cfg.optimizer.lr:
        raise ConfigError(f"schedule.min_lr ({cfg.schedule.min_lr}) must not exceed optimizer.lr ({cfg.optimizer.lr})")
    if cfg.output.best_by == "metric" and not cfg.evaluation.generate:
        raise ConfigError("output.best_by is metric but evaluation.generate is 0: set how many examples to score")
    for key, field in TEMPLATES.items():
        check_template(key, lookup(cfg, key), field)


def check_template(key: str, template: str, field: str) -> None:
    """A template may name only `{field}`, plainly: no other key, attribute, index or format spec."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ConfigError(f"{key} is not a valid template ({error}); write braces as {{{{ and }}}}") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name != field or spec or conversion:
            shown = "{" + name + ("!" + conversion if conversion else "") + (":" + spec if spec else "") + "}"
            raise ConfigError(f"{key} may contain only {{{field}}}, got {short(shown)}")


def numbers(instance: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(dotted key, value) of every float in a config of nested dataclasses and lists; the model section too."""
    items = (
        ((f.name, getattr(instance, f.name)) for f in dataclasses.fields(instance))
        if dataclasses.is_dataclass(instance)
        else instance.items()
    )
    for name, value in items:
        key = f"{prefix}{name}"
        if isinstance(value, float):
            yield key, value
        elif isinstance(value, list):
            yield from ((f"{key}[{i}]", v) for i, v in enumerate(value) if isinstance(v, float))
        elif isinstance(value, dict) or dataclasses.is_dataclass(value):
            yield from numbers(value, f"{key}.")


def lookup(cfg: Any, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)
