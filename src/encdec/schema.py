"""One declared schema for every value encdec reads: typed dataclasses whose fields carry their rules.

A field's annotation is the whole rule: its type, `Literal[...]` for allowed values, and
`Annotated[..., Range(...)]` for bounds (or any rule with a `check(value, key, base_type)`
method: `Length`, a run config's `Template`), beside the field and nowhere else:

    @dataclass
    class TrainingSection:
        steps: Annotated[int, Range(1, 10**9)] = 1000
        precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
        clip_norm: Annotated[float, Range(0)] = 1.0      # every float must also be finite

`read(TrainingSection, values, "training.")` builds the dataclass from a mapping read from YAML
or JSON: every key known (the closest known one suggested), every value of its declared type
(true is not an integer, "0.5" is not a number), in its range, nested dataclasses recursed.
Cross-field rules live in the class's `__post_init__`, which runs after the fields passed.
`check(instance)` runs the same field rules over a dataclass built in Python. Every refusal is
one ConfigError sentence naming the key, what it allows and (cut short) what it got.

`load_yaml` and `load_json` read the text first: bounded in size and nesting, string keys
only, no YAML aliases (their expansion is unbounded).

Every number read from text (a command-line option, a YAML or JSON scalar) is at most MAX_NUMBER_CHARS
characters, checked before it is converted (Python's int() refuses 4,300 digits and is slow below),
then checked as its field declares: an integer within its range and MAX_INT, a float finite and within
its range. A YAML scalar tagged as what it cannot be (`!!int abc`) is one sentence too.
"""

import collections.abc
import dataclasses
import functools
import json
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from encdec.errors import ConfigError, EncdecError, suggestion

MAX_DEPTH = 32  # nesting of a config or run file: the deepest real one is 4
MAX_INT = 2**62  # no count encdec reads comes near; a larger one is a mistake or an attack
MAX_FILE_BYTES = 1 << 20  # configs and run files are a page or two; anything near this is a mistake
MAX_NUMBER_CHARS = 100  # a number written as text: MAX_INT has 19 digits, a float's repr at most 24 characters
NUMBER_CHARACTERS = frozenset("0123456789_+-.eE")  # what a long text made only of is a number too long to read

__all__ = [
    "Count",
    "Duration",
    "InVocabulary",
    "Length",
    "Positive",
    "Range",
    "Satisfies",
    "argument_type",
    "TokenId",
    "check",
    "check_vocabulary",
    "field_type",
    "json_number",
    "number",
    "load_json",
    "load_yaml",
    "read",
    "short",
]


@dataclass(frozen=True)
class Range:
    """Bounds of a number: lo <= x <= hi, or lo < x with `above`, x < hi with `below`."""

    lo: float | None = None
    hi: float | None = None
    above: bool = False  # lo itself excluded
    below: bool = False  # hi itself excluded
    says: str | None = None  # what it allows, where the words should be the field's own ("zero (off) or more")

    def holds(self, x: float) -> bool:
        if self.lo is not None and (x <= self.lo if self.above else x < self.lo):
            return False
        return self.hi is None or (x < self.hi if self.below else x <= self.hi)

    def check(self, value: float, key: str, base: type) -> None:
        if not self.holds(value):
            raise ConfigError(f"{key} must be {self.allows(value, base is int)}, got {short(value)}")

    def allows(self, value: float, integer: bool) -> str:
        """What the range allows, as the end of "KEY must be ...": the interval for fractions, else the
        side `value` falls out of."""
        lo, hi = self.lo, self.hi
        if self.says:
            return self.says
        if lo is not None and hi is not None and hi <= 1:
            return f"in {'(' if self.above else '['}{lo:g}, {hi:g}{')' if self.below else ']'}"
        if lo is not None and (value <= lo if self.above else value < lo):
            if integer and lo == 1 and not self.above:
                return "a positive integer"
            if lo == 0:
                return "positive" if self.above else "zero or more"
            return f"{'more than' if self.above else 'at least'} {lo:g}"
        return f"{'below' if self.below else 'at most'} {hi:,}"


Count = Annotated[int, Range(0)]  # the integers most fields are: a count, a step, an id (and at most MAX_INT)
Positive = Annotated[int, Range(1)]


@dataclass(frozen=True)
class InVocabulary:
    """Marks a field of token ids (one, a list, lists of lists): each must lie below the vocabulary's size. That
    size is another field's (ModelConfig.vocab_size) or the model's (a generation option), so `check_vocabulary`
    applies the rule once it is known, to every field so marked: one rule for every special id, whichever file,
    option or call it comes from."""

    def check(self, value: Any, key: str, base: type) -> None:
        """Nothing the value alone decides (its type and sign are the other rules')."""


TokenId = Annotated[int, Range(0), InVocabulary()]  # a token id: an integer from 0, below the vocabulary's size


@dataclass(frozen=True)
class Satisfies:
    """A rule that is a test of its own (a pair, a list of ids): it alone decides, the annotated type
    only documents what passes."""

    test: Callable[[Any], bool]
    says: str

    def check(self, value: Any, key: str, base: type) -> None:
        if not self.test(value):
            raise ConfigError(f"{key} must be {self.says}, got {short(value)}")


@dataclass(frozen=True)
class Length:
    """A list of exactly n items (each within `each`, where given), said as "n `what`"."""

    n: int
    what: str = "items"
    each: Range | None = None

    def check(self, value: list, key: str, base: type) -> None:
        if len(value) != self.n or (self.each and not all(self.each.holds(x) for x in value)):
            count = ("no", "one", "two", "three", "four")[self.n] if self.n < 5 else str(self.n)
            raise ConfigError(f"{key} must be {count} {self.what}, got {short(value)}")


DURATION_UNITS = re.compile(r"(?:(\d{1,5})h)?(?:(\d{1,7})m)?(?:(\d{1,9}(?:\.\d{1,6})?)s)?")  # 1h30m, 90s
CLOCK = re.compile(r"(\d{1,5}):(\d{2}):(\d{2}(?:\.\d{1,6})?)")  # H:MM:SS


@dataclass(frozen=True)
class Duration:
    """A time in seconds that a text may write: 90s, 15m, 1h30m (units summed), or 1:30:00 (H:MM:SS, its minutes
    and seconds below 60, as a clock's); a number is seconds already. The text is read before the type's rule."""

    EXAMPLES = "a duration such as 90s, 15m, 1h30m or 1:30:00, or seconds"

    def read(self, value: Any, key: str) -> Any:
        if not isinstance(value, str):
            return value
        words = value.strip().lower()
        clock = CLOCK.fullmatch(words)
        if clock:
            hours, minutes, seconds = (float(part) for part in clock.groups())
            if minutes >= 60 or seconds >= 60:
                raise ConfigError(f"{key} must keep the minutes and seconds of H:MM:SS below 60, got {short(value)}")
            return hours * 3600 + minutes * 60 + seconds
        units = DURATION_UNITS.fullmatch(words)
        if not (units and words):
            raise ConfigError(f"{key} must be {self.EXAMPLES}, got {short(value)}")
        hours, minutes, seconds = (float(part) if part else 0.0 for part in units.groups())
        return hours * 3600 + minutes * 60 + seconds

    def check(self, value: Any, key: str, base: type) -> None:
        """Nothing more: the text was read (`read`), the number's range is another rule's."""


def read(cls: type, values: Any, prefix: str = "") -> Any:
    """Dataclass `cls` from `values` (a mapping from YAML or JSON), every key and value checked."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'the config'} must be a mapping, got {short(values)}")
    hints = typing.get_type_hints(cls, include_extras=True)
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


def check(instance: Any, prefix: str = "") -> None:
    """Check every field of dataclass `instance` (built in Python, not read) against its declaration."""
    hints = typing.get_type_hints(type(instance), include_extras=True)
    for f in dataclasses.fields(instance):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            check(value, f"{prefix}{f.name}.")
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
        raise errors[0]
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

    def parse(text: str) -> Any:
        if inner is str:  # a name or a separator: "2024" stays text
            return value_of(annotation, text, flag)
        value = [number(part.strip(), flag) for part in text.split(",")] if listed else number(text, flag)
        return value_of(annotation, value, flag)

    return parse


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


def short(value: object, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (an error names a value, it does not print a megabyte);
    integers with thousands separators."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = f"{value:,}" if abs(value) < 10**30 else f"an integer of {len(str(abs(value)))} digits"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
