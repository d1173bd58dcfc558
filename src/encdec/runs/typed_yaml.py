"""Typed dataclasses from YAML-like dicts, with errors that name the key.

`from_dict(RunConfig, values)` walks the dataclass fields: nested dataclasses
recurse, scalars are checked against their annotation (int, float, str, bool,
optional, lists), unknown keys are rejected with the known ones listed.
`apply_override(values, "training.steps=10")` edits the raw dict first.
"""

import dataclasses
import types
import typing
from typing import Any

import yaml

from encdec.errors import ConfigError, suggestion


def from_dict(cls, values: dict | None, prefix: str = ""):
    """Build dataclass `cls` from `values`, checking every key and type."""
    values = values or {}
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'the config'} must be a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown key {prefix}{short(unknown[0])[1:-1]}{suggestion(str(unknown[0]), sorted(known))}")
    kwargs = {}
    for name, value in values.items():
        kwargs[name] = check_value(hints[name], value, f"{prefix}{name}")
    return cls(**kwargs)


def check_value(annotation: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if dataclasses.is_dataclass(annotation):
        return from_dict(annotation, value, f"{key}.")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for candidate in inner:
            try:
                return check_value(candidate, value, key)
            except ConfigError as error:
                errors.append(error)
        raise errors[0]
    if origin is list:
        if not isinstance(value, list):
            value = [value]
        return [check_value(args[0], item, f"{key}[{i}]") for i, item in enumerate(value)] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {short(value)}")
        return value
    if annotation is typing.Any:
        return value
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation is float and isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if annotation in (int, float) and isinstance(value, bool) or not isinstance(value, annotation):
        raise ConfigError(f"{key} must be {_type_name(annotation)}, got {short(value)}")
    return value


def short(value: object, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters: an error names a value, it does not print a megabyte."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(annotation: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def apply_override(values: dict, assignment: str) -> None:
    """Apply "a.b.c=value" to nested dict `values`; the value is parsed as YAML (10, 1e-3, true, [1, 2])."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set takes key.sub=value, got {assignment!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}: the value {short(raw)} is not valid YAML") from None
    node = values
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {part} is not a section")
    node[parts[-1]] = value
