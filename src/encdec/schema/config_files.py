"""YAML and JSON text read before any field is: bounded in size and nesting, string keys only, no YAML aliases
(their expansion is unbounded), every number at most MAX_NUMBER_CHARS characters before it is converted."""

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from encdec.errors import ConfigError, EncdecError
from encdec.schema.rules import MAX_NUMBER_CHARS, short

MAX_DEPTH = 32  # nesting of a config or run file: the deepest real one is 4
MAX_FILE_BYTES = 1 << 20  # configs and run files are a page or two; anything near this is a mistake


class YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading 1e-4 as the number YAML 1.2 says it is (YAML 1.1 wants a dot) and 1:30 as
    the text it is there (YAML 1.1 reads base 60), and numbers, booleans and dates of at most MAX_NUMBER_CHARS
    characters, each what its tag says or refused."""


class ScalarError(ConfigError):
    """A YAML scalar that cannot be what its tag says; load_yaml names the text it is in."""


def bounded_constructor(tag: str, kind: str) -> Callable:
    """PyYAML's constructor of `tag`, refusing a scalar longer than MAX_NUMBER_CHARS before converting it and
    one it cannot convert (`!!int abc`, `!!timestamp 2020-13-45`) in one sentence."""
    construct = yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{tag}"]

    def constructor(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode) and len(node.value) > MAX_NUMBER_CHARS:
            raise ScalarError(
                f"holds a {kind} of {len(node.value):,} characters at line {line}; encdec reads at most {MAX_NUMBER_CHARS}"
            )
        try:
            return construct(loader, node)
        except (ValueError, KeyError, AttributeError, IndexError, TypeError):
            raise ScalarError(f"holds {short(node.value)} at line {line}, which is not a {kind}") from None

    return constructor


for _tag, _kind in (("int", "number"), ("float", "number"), ("bool", "boolean"), ("timestamp", "date")):
    YamlLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", bounded_constructor(_tag, _kind))
YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


# YAML 1.1's base-60 numbers are not YAML 1.2's: 1:30:00 stays text (a Duration reads it as H:MM:SS, anything
# else refuses it), not 5400, and 1:99 text, not 159 in silence
YamlLoader.yaml_implicit_resolvers = {
    first: [
        (tag, re.compile(r"(?!.*:)" + pattern.pattern, pattern.flags) if tag.endswith((":int", ":float")) else pattern)
        for tag, pattern in resolvers
    ]
    for first, resolvers in YamlLoader.yaml_implicit_resolvers.items()
}


def load_yaml(text: str, what: str) -> Any:
    """The value a YAML text holds: no aliases, nested at most MAX_DEPTH, mappings with string keys."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=YamlLoader):
            if isinstance(event, yaml.AliasEvent):
                raise ConfigError(f"{what} uses YAML aliases (*name), which encdec does not accept")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError(f"{what} nests deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        value = yaml.load(text, Loader=YamlLoader)
    except ScalarError as error:
        raise ConfigError(f"{what} {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise ConfigError(f"{what} is not valid YAML{f' at line {mark.line + 1}' if mark else ''}") from None
    check_keys(value, what)
    return value


def read_yaml_file(path: Path) -> dict:
    """The mapping a YAML config file holds (a run config, or the one a checkpoint saved): bounded in size and
    nesting, UTF-8, string keys, without aliases (whose expansion is unbounded: a few lines of nested aliases
    make billions of nodes)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"config file {path} is {size:,} bytes; run configs are at most {MAX_FILE_BYTES:,}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {error.start})") from None
    values = load_yaml(text, f"config file {path}")
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(values).__name__}")
    return values


def load_json(path: Path, what: str, error: type[EncdecError] = ConfigError, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The value JSON file `path` holds: a regular file of at most `max_bytes`, UTF-8, nested at most
    MAX_DEPTH, with finite numbers; anything else is one sentence (`error`) naming `what`."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} is missing or not a regular file")
    if path.stat().st_size > max_bytes:
        raise error(f"{what} {path} is {path.stat().st_size:,} bytes; encdec reads at most {max_bytes:,}")
    try:
        with open(path, "rb") as f:
            text = f.read(max_bytes + 1).decode("utf-8")
        value = json.loads(
            text, parse_constant=refuse_constant, parse_int=json_number(int), parse_float=json_number(float)
        )
    except UnicodeDecodeError as problem:
        raise error(f"{what} {path} is not UTF-8 text (byte {problem.start})") from None
    except json.JSONDecodeError as problem:
        raise error(f"{what} {path} is not valid JSON (line {problem.lineno})") from None
    except (RecursionError, ConfigError) as problem:
        reason = str(problem) if isinstance(problem, ConfigError) else f"nests deeper than {MAX_DEPTH} levels"
        raise error(f"{what} {path} {reason}") from None
    try:
        check_keys(value, f"{what} {path}")
    except ConfigError as problem:
        raise error(str(problem)) from None
    return value


def refuse_constant(name: str) -> None:
    raise ConfigError(f"holds {name}, which is not a number encdec accepts")


def json_number(convert: type) -> Callable[[str], Any]:
    """json's parse_int or parse_float: `convert`, after refusing a number longer than MAX_NUMBER_CHARS."""

    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise ConfigError(f"holds a number of {len(text):,} characters; encdec reads at most {MAX_NUMBER_CHARS}")
        return convert(text)

    return parse


def check_keys(value: Any, what: str, depth: int = 0) -> None:
    """Refuse nesting deeper than MAX_DEPTH and mapping keys that are not strings (YAML's 1:, yes:, ~:)."""
    if depth > MAX_DEPTH:
        raise ConfigError(f"{what} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{what} has the key {short(key)}; keys must be names (quote them)")
            check_keys(item, what, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_keys(item, what, depth + 1)
