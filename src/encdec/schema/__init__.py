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

rules.py holds the rules, values.py reads and checks values by them, config_files.py reads YAML and JSON text.
"""

from encdec.schema.config_files import MAX_DEPTH, MAX_FILE_BYTES, json_number, load_json, load_yaml, read_yaml_file
from encdec.schema.rules import (
    MAX_INT,
    MAX_NUMBER_CHARS,
    Count,
    Duration,
    InVocabulary,
    Length,
    Positive,
    Range,
    Satisfies,
    TokenId,
    short,
)
from encdec.schema.values import (
    argument_type,
    check,
    check_vocabulary,
    field_type,
    fields_of,
    number,
    read,
    value_of,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT",
    "MAX_NUMBER_CHARS",
    "Count",
    "Duration",
    "InVocabulary",
    "Length",
    "Positive",
    "Range",
    "Satisfies",
    "TokenId",
    "argument_type",
    "check",
    "check_vocabulary",
    "field_type",
    "fields_of",
    "json_number",
    "load_json",
    "load_yaml",
    "number",
    "read",
    "read_yaml_file",
    "short",
    "value_of",
]
