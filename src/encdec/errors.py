"""The project's own exception types.

Errors meant for users are one clear sentence. The CLI prints the sentence and
exits non-zero; library callers can catch `EncdecError`.
"""

from collections.abc import Iterable, Sequence

MAX_SENTENCE = 280  # characters of a refusal's sentence that the command line's one line (cli.MAX_LINE) keeps whole
MAX_LISTED = 120  # characters of a list inside a sentence: the sentence's reason must still fit on its line


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


class Unmet(ConfigError):
    """What keeps a thing from a form, a clause each ("norm must be rmsnorm"), said where `sentence` holds
    "{unmet}": as many whole clauses as keep the sentence within MAX_SENTENCE, the rest counted ("; and 3 more").

        Unmet("this model cannot be saved as Hugging Face Llama: {unmet}", ["position must be rope", ...])
    """

    def __init__(self, sentence: str, unmet: Sequence[str]):
        self.sentence, self.unmet = sentence, [str(clause) for clause in unmet]
        room = MAX_SENTENCE - len(sentence) + len("{unmet}")
        super().__init__(sentence.replace("{unmet}", listed(self.unmet, "; ", room)))

    def __reduce__(self):  # pickled (to another process) as made, not from its message alone
        return Unmet, (self.sentence, self.unmet)

    def reworded(self, sentence: str) -> "Unmet":
        """The same clauses in another sentence, where "{said}" stands for this one's (its list made anew to fit)."""
        return Unmet(sentence.replace("{said}", self.sentence), self.unmet)


def suggestion(name: str, known: list[str] | tuple[str, ...], what: str = "known") -> str:
    """The end of an "unknown X" sentence: the closest known name, else the known names if they are few."""
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"; did you mean {close[0]}?"
    listed = ", ".join(sorted(known))
    return f"; {what}: {listed}" if len(listed) <= 150 else f"; {len(known)} are {what}, none close to it"


def listed(items: Sequence[str], separator: str = ", ", budget: int = MAX_LISTED) -> str:
    """`items` joined by `separator`, as many whole ones as fit in `budget` characters (the first always), the
    rest counted: "norm must be X; activation must be Y; and 3 more". A refusal that lists what is wrong so keeps
    its start and its reason whole on its one line (encdec.cli.one_line), however many things are wrong."""
    items = [str(item) for item in items]
    for shown in range(len(items), 0, -1):
        rest = len(items) - shown
        text = separator.join(items[:shown]) + (f"{separator.rstrip()} and {rest} more" if rest else "")
        if len(text) <= budget or shown == 1:
            return text
    return ""


def refuse_unknown_keys(keys: Iterable[str], known: Iterable[str], sentence: str) -> None:
    """Raise ConfigError for the first of `keys` (sorted) not in `known`, naming the closest known one.

    `sentence` is formatted with `key`: "unknown model key {key!r}" gives
    "unknown model key 'd_modle'; did you mean d_model?".
    """
    known = sorted(known)
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ConfigError(sentence.format(key=unknown[0]) + suggestion(unknown[0], known))
