"""The rules a field's annotation carries (`Range`, `Length`, `Satisfies`, `Duration`, `InVocabulary`) and the
common integer kinds (`Count`, `Positive`, `TokenId`); `values` applies them. `short` cuts a value for a refusal."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from encdec.errors import ConfigError

MAX_INT = 2**62  # no count encdec reads comes near; a larger one is a mistake or an attack
MAX_NUMBER_CHARS = 100  # a number written as text: MAX_INT has 19 digits, a float's repr at most 24 characters
NUMBER_CHARACTERS = frozenset("0123456789_+-.eE")  # what a long text made only of is a number too long to read


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


def short(value: object, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (an error names a value, it does not print a megabyte);
    integers with thousands separators."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = f"{value:,}" if abs(value) < 10**30 else f"an integer of {len(str(abs(value)))} digits"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
