"""The project's own exception types.

Errors meant for users are one clear sentence. The CLI prints the sentence and
exits non-zero; library callers can catch `EncdecError`.
"""

from collections.abc import Iterable


class EncdecError(Exception):
    """Base class for every error encdec reports to a user."""


class ConfigError(EncdecError):
    """A configuration value is missing, unknown or out of range."""


class DataError(EncdecError):
    """A data file or tokenizer cannot be read or does not have the expected form."""


class TrainingError(EncdecError):
    """Training cannot go on: its loss is no longer a number."""


class CheckpointError(EncdecError):
    """A checkpoint or model directory is missing, corrupt or unsafe to load."""


def suggestion(name: str, known: list[str] | tuple[str, ...], what: str = "known") -> str:
    """The end of an "unknown X" sentence: the closest known name, else the known names if they are few."""
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"; did you mean {close[0]}?"
    listed = ", ".join(sorted(known))
    return f"; {what}: {listed}" if len(listed) <= 150 else f"; {len(known)} are {what}, none close to it"


def refuse_unknown_keys(keys: Iterable[str], known: Iterable[str], sentence: str) -> None:
    """Raise ConfigError for the first of `keys` (sorted) not in `known`, naming the closest known one.

    `sentence` is formatted with `key`: "unknown model key {key!r}" gives
    "unknown model key 'd_modle'; did you mean d_model?".
    """
    known = sorted(known)
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ConfigError(sentence.format(key=unknown[0]) + suggestion(unknown[0], known))
