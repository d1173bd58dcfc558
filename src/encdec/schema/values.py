"""Reading a value as its declared annotation: `read` builds a dataclass from a mapping (YAML or JSON), `check`
runs the same rules over one built in Python, `argument_type` makes a command-line option take what a field
takes, and `check_vocabulary` applies InVocabulary once the vocabulary's size is known."""

import collections.abc
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING
from typing import Annotated, Any, Literal

from encdec.errors import ConfigError, suggestion
from encdec.schema.rules import MAX_INT, MAX_NUMBER_CHARS, NUMBER_CHARACTERS, InVocabulary, Satisfies, short


def read(cls: type, values: Any, prefix: str = "") -> Any:
    """Dataclass `cls` from `values` (a mapping from YAML or JSON), every key and value checked."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'the config'} must be a mapping, got {short(values)}")
    hints = hints_of(cls)
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in values:
        if not isinstance(key, str):
            raise ConfigError(f"{prefix.rstrip('.') or 'the config'} has the key {short(key)}; keys must be names")
        if key not in known:
            raise ConfigError(f"unknown key {prefix}{short(key)[1:-1]}{suggestion(key, known)}")
    for f in dataclasses.fields(cls):
        if f.init and f.name not in values and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{prefix}{f.name} is missing")
    return cls(**{key: value_of(hints[key], value, prefix + key) for key, value in values.items()})


@functools.cache
def hints_of(cls: type) -> dict[str, Any]:
    """Dataclass `cls`'s annotations, resolved once (every generate call checks its options: resolving them took
    40% of the 0.34 ms a served request's checks cost); read, never changed."""
    return typing.get_type_hints(cls, include_extras=True)


@functools.cache
def valid_defaults(cls: type) -> dict[str, Any]:
    """{name: default} of dataclass `cls`'s fields whose plain default passes its own declaration, checked once:
    a field that still holds that very object needs no check again (most of a request's options)."""
    hints, valid = hints_of(cls), {}
    for f in dataclasses.fields(cls):
        if f.default is MISSING or dataclasses.is_dataclass(f.default):
            continue
        try:
            value_of(hints[f.name], f.default, f.name)
        except ConfigError:
            continue
        valid[f.name] = f.default
    return valid


@functools.cache
def fields_of(cls: type) -> tuple[dataclasses.Field, ...]:
    """Dataclass `cls`'s fields, listed once (dataclasses.fields filters them anew at each call: a served request's
    options, a hundred fields, were listed twice a request)."""
    return dataclasses.fields(cls)


def check(instance: Any, prefix: str = "") -> None:
    """Check every field of dataclass `instance` (built in Python, not read) against its declaration (a field
    holding its own default, checked once, is not checked again)."""
    hints, defaults = hints_of(type(instance)), valid_defaults(type(instance))
    for f in fields_of(type(instance)):
        value = getattr(instance, f.name)
        if f.name in defaults and value is defaults[f.name]:
            continue
        if dataclasses.is_dataclass(value):
            check(value, f"{prefix}{f.name}.")
        elif value is None and dataclasses.is_dataclass(hints[f.name]):  # a section set to None in Python
            raise ConfigError(f"{prefix}{f.name} must be a mapping of its settings, got None")
        elif isinstance(value, list) and value and all(dataclasses.is_dataclass(item) for item in value):
            for i, item in enumerate(value):  # a list of sections (data.mixture's members)
                check(item, f"{prefix}{f.name}[{i}].")
        else:
            value_of(hints[f.name], value, prefix + f.name)


def check_vocabulary(cls: type, values: collections.abc.Mapping, vocab_size: int, prefix: str = "") -> None:
    """Every token id that `values` (an instance's fields, or a mapping read for dataclass `cls`) holds in a field
    `cls` marks InVocabulary below `vocab_size`, else one ConfigError naming the field (and the item of a list)
    and the id."""
    marked = vocabulary_fields(cls)
    for name, value in values.items():
        if name in marked:
            for key, token in token_ids(value, prefix + name):
                if token >= vocab_size:
                    raise ConfigError(f"{key} must be below vocab_size ({vocab_size:,}), got {short(token)}")


@functools.cache
def vocabulary_fields(cls: type) -> frozenset[str]:
    """The fields of dataclass `cls` marked InVocabulary, read from its annotations once (every generate call
    checks its options' ids)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return frozenset(name for name, hint in hints.items() if marks_vocabulary(hint))


def marks_vocabulary(annotation: Any) -> bool:
    """Whether `annotation`, or a type inside it (a list's items, a union's members), is marked InVocabulary."""
    if typing.get_origin(annotation) is Annotated and any(
        isinstance(rule, InVocabulary) for rule in annotation.__metadata__
    ):
        return True
    return any(marks_vocabulary(inner) for inner in typing.get_args(annotation))


def token_ids(value: Any, key: str) -> collections.abc.Iterator[tuple[str, int]]:
    """(key, id) for every integer in `value`, an id or nested lists of them, the key indexed as the item is."""
    if isinstance(value, int) and not isinstance(value, bool):
        yield key, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from token_ids(item, f"{key}[{i}]")


def value_of(annotation: Any, value: Any, key: str) -> Any:
    """`value` as `annotation` declares it (ints widened to float where a float is declared), else ConfigError."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        for rule in args[1:]:  # a rule that reads a text into the value (Duration) goes first
            value = rule.read(value, key) if hasattr(rule, "read") else value
        if any(isinstance(rule, Satisfies) for rule in args[1:]):
            for rule in args[1:]:
                rule.check(value, key, args[0])
            return value
        if args[0] is int and isinstance(value, int) and not isinstance(value, bool):
            for rule in args[1:]:  # the declared bounds first: they say more than MAX_INT
                rule.check(value, key, int)
        value = value_of(args[0], value, key)
        for rule in args[1:]:
            if value is not None:
                rule.check(value, key, args[0])
        return value
    if dataclasses.is_dataclass(annotation):
        return read(annotation, value, f"{key}.")
    if origin is Literal:
        if not any(value == a and type(value) is type(a) for a in args):
            raise ConfigError(f"{key} must be one of {', '.join(map(str, args))}, got {short(value)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for candidate in inner:
            try:
                return value_of(candidate, value, key)
            except ConfigError as error:
                errors.append(error)
        listed = isinstance(value, list)  # a list's refusal is the list member's, where the union has one
        raise next((e for c, e in zip(inner, errors) if lists(c) == listed), errors[0])
    if origin is list:
        if not isinstance(value, list):
            if args != (str,) or not isinstance(value, str):
                raise ConfigError(f"{key} must be a list, got {short(value)}")
            value = [value]  # `train: file.txt` for a list of one name
        return [value_of(args[0], item, f"{key}[{i}]") for i, item in enumerate(value)] if args else value
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{key} must be a mapping with names for keys, got {short(value)}")
        return {k: value_of(args[1], v, f"{key}.{k}") for k, v in value.items()} if args else value
    if origin is collections.abc.Callable:
        if not callable(value):
            raise ConfigError(f"{key} must be a function, got {short(value)}")
        return value
    if annotation is Any:
        return value
    return scalar(annotation, value, key)


def argument_type(annotation: Any, flag: str) -> Callable[[str], Any]:
    """An argparse `type=` for a command-line option declared as `annotation` (a field's, so that the
    option and the field it sets take the same values): the text read as a number where it is one
    (`number`), a list comma-separated where a list is declared, then checked as `value_of` checks a
    config value, the refusal naming `flag`."""
    inner = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation
    listed = typing.get_origin(inner) is list
    may_list = any(lists(member) for member in typing.get_args(inner))  # a number, or a list of them

    def parse(text: str) -> Any:
        if inner is str:  # a name or a separator: "2024" stays text
            return value_of(annotation, text, flag)
        if listed or (may_list and "," in text):
            value = [number(part.strip(), flag) for part in text.split(",")]
        else:
            value = number(text, flag)
        return value_of(annotation, value, flag)

    return parse


def lists(annotation: Any) -> bool:
    """Whether `annotation` is a list, bare or annotated with rules."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return typing.get_origin(annotation) is list


def field_type(cls: type, name: str, flag: str | None = None) -> Callable[[str], Any]:
    """argument_type of dataclass `cls`'s field `name`: an option taking what the config key takes."""
    return argument_type(typing.get_type_hints(cls, include_extras=True)[name], flag or "--" + name.replace("_", "-"))


def number(text: str, key: str) -> int | float | str:
    """The number `text` writes: an int where it is a whole one, else a float (inf and nan too, for the
    field's rule to refuse), else `text` itself, a word. A number longer than MAX_NUMBER_CHARS characters
    is refused before it is converted."""
    if len(text) > MAX_NUMBER_CHARS:
        if text.strip() and set(text.strip()) <= NUMBER_CHARACTERS:
            raise ConfigError(f"{key} takes numbers of at most {MAX_NUMBER_CHARS} characters, got {len(text):,}")
        return text
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    return text


def scalar(annotation: type, value: Any, key: str) -> Any:
    is_bool = isinstance(value, bool)
    if annotation is float and isinstance(value, int) and not is_bool:
        value = float(value) if abs(value) <= 1e300 else math.inf
    if (annotation in (int, float) and is_bool) or not isinstance(value, annotation):
        raise ConfigError(f"{key} must be {TYPE_NAMES.get(annotation, annotation.__name__)}, got {short(value)}")
    if annotation is float and not math.isfinite(value):
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    if annotation is int and abs(value) > MAX_INT:
        raise ConfigError(f"{key} must be at most {MAX_INT:,} in size, got {short(value)}")
    return value


TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a mapping"}
