"""Options several commands share, each derived from the declaration of what it sets.

add_reader_options     --text-field, --source-field, ...: encdec.data.formats.ReaderOptions' fields
"""

import argparse
import dataclasses

from encdec.data.formats import FILE_FORMATS, FORMATS, OPTION_NAMES, ReaderOptions
from encdec.schema import field_type


def flag_of(name: str) -> str:
    """A declared name as its command-line flag: source_field -> --source-field."""
    return "--" + name.replace("_", "-")


def add_reader_options(parser: argparse.ArgumentParser, default: str = "") -> None:
    """A flag for each reader option (not given: None), its help naming the formats that take it;
    `default` says where a value not given comes from before ReaderOptions' own default."""
    for option in dataclasses.fields(ReaderOptions):
        takers = " / ".join(name for name in FILE_FORMATS if option.name in FORMATS[name].options)
        flag = flag_of(option.name)
        parser.add_argument(
            flag,
            dest=option.name,
            type=field_type(ReaderOptions, option.name, flag),
            default=None,
            help=f"{takers}: {option.metadata['help']} (default: {default}{option.default!r})",
        )


def given_reader_options(args: argparse.Namespace) -> dict:
    """The reader options the command line gave (None where not given)."""
    return {name: getattr(args, name) for name in OPTION_NAMES}
