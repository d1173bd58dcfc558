r"""Patterns over module and parameter names, matched in bounded work whatever the pattern.

`lora.target_modules` given as one string is a regular expression the whole module name must match
(peft's rule). Python's `re` backtracks: `(a+)+$` or `(x+x+)+y` against a long name runs for hours.
Here a pattern is parsed into a Thompson automaton (Thompson 1968; Cox 2007, "Regular Expression
Matching Can Be Simple And Fast") run over all its states at once, each visited at most once per
character, so one match costs at most len(program) x (len(name) + 1) steps. The subset of Python's
syntax it takes, with Python's meaning:

    characters and escaped punctuation (q, \., \(), any character ., \d \w \s \D \W \S
    classes [qkv] [a-z_] [^.] (\d \w \s inside too)
    groups (...) and (?:...), alternatives a|b, quantifiers * + ? {m} {m,} {m,n} (lazy *? alike)
    ^ $ \A \Z: the name's start and end

Anything else (a backreference \1, a lookaround (?=...), a flag (?i), a named group, a possessive
quantifier) is refused in one sentence naming the key, as is a pattern of more than MAX_PATTERN
characters, groups nested deeper than MAX_NESTING, or counted repetitions that make more than
MAX_PROGRAM states.

`NamePatterns` is the schema rule of the config keys that hold patterns: a list of at most
MAX_PATTERNS names or globs (training.train_only's, matched by fnmatch, whose stars Python
matches without backtracking) of at most MAX_PATTERN characters each, or one regular expression.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from encdec.errors import ConfigError
from encdec.schema import short

MAX_PATTERN = 256  # characters of one pattern: encdec's longest module name has about 60
MAX_PATTERNS = 256  # patterns in one list: a model has a few dozen kinds of layer
MAX_NESTING = 16  # groups inside groups
MAX_COUNT = 1000  # the largest m or n of {m,n}
MAX_PROGRAM = 4096  # automaton states, counted repetitions expanded
MAX_CACHED = 1 << 20  # states held by remembered transitions (names share most of their steps): some 50 MB

SUBSET = r"name patterns take characters, . \d \w \s, [...], (...), (?:...), | and * + ? {m,n}"
CLASSES: dict[str, Callable[[str], bool]] = {
    "d": str.isdecimal,
    "w": lambda c: c.isalnum() or c == "_",
    "s": str.isspace,
    "D": lambda c: not c.isdecimal(),
    "W": lambda c: not (c.isalnum() or c == "_"),
    "S": lambda c: not c.isspace(),
}
CONTROLS = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
QUANTIFIERS = {"*": (0, None), "+": (1, None), "?": (0, 1)}

# A parsed pattern is a tree of tuples:
#   ("char", test)  ("cat", [node, ...])  ("alt", [node, ...])  ("repeat", node, lo, hi or None)
#   ("start",)  ("end",)
# and the program a list of instructions, entered at `entry`:
#   ("char", test, next)  ("split", next, other)  ("start", next)  ("end", next)  ("match",)


class NamePattern:
    """One regular expression of the subset above, compiled; `fullmatch(name)` in bounded steps."""

    def __init__(self, pattern: str, key: str):
        if len(pattern) > MAX_PATTERN:
            raise ConfigError(f"{key} is a pattern of {len(pattern):,} characters; at most {MAX_PATTERN}")
        tree = Parser(pattern, key).parse()
        if size(tree) > MAX_PROGRAM:
            raise ConfigError(f"{key} {short(pattern)} repeats to more than {MAX_PROGRAM:,} states; count less")
        self.steps = 0  # states visited so far: at most 2 x len(program) for each character of a name, and its end
        self.program: list[tuple] = [("match",)]
        self.entry = self.build(tree, 0)
        self.begin = self.closure({self.entry}, at_start=True, at_end=False)
        self.cache: dict[tuple[frozenset, str], frozenset] = {}  # (states, character) -> states after it
        self.cached = 0  # states the cache holds

    def fullmatch(self, name: str) -> bool:
        """Whether the whole of `name` matches (re.fullmatch's answer)."""
        states = self.begin
        for c in name:
            if not states:
                return False
            after = self.cache.get((states, c))
            if after is None:
                moved = {op[2] for op in map(self.program.__getitem__, states) if op[0] == "char" and op[1](c)}
                self.steps += len(states)
                after = self.closure(moved, at_start=False, at_end=False)
                if self.cached < MAX_CACHED:
                    self.cache[states, c] = after
                    self.cached += len(states) + len(after)
            states = after
        return 0 in self.closure(states, at_start=not name, at_end=True)

    def closure(self, states: set[int], at_start: bool, at_end: bool) -> frozenset:
        """The states reached from `states` without reading a character: splits followed, ^ passed at the
        name's start and $ at its end; a $ before the end is kept (it may pass once the name ends)."""
        seen, stack, kept = set(), list(states), set()
        while stack:
            state = stack.pop()
            if state in seen:
                continue
            seen.add(state)
            op = self.program[state]
            if op[0] == "split":
                stack += [op[1], op[2]]
            elif op[0] == "start":
                if at_start:
                    stack.append(op[1])
            elif op[0] == "end":
                if at_end:
                    stack.append(op[1])
                else:
                    kept.add(state)
            else:
                kept.add(state)
        self.steps += len(seen)
        return frozenset(kept)

    def build(self, node: tuple, then: int) -> int:
        """Emit the instructions of `node`, continuing at state `then`; its entry state."""
        kind = node[0]
        if kind == "char":
            return self.emit(("char", node[1], then))
        if kind in ("start", "end"):
            return self.emit((kind, then))
        if kind == "cat":
            for item in reversed(node[1]):
                then = self.build(item, then)
            return then
        if kind == "alt":
            entries = [self.build(branch, then) for branch in node[1]]
            entry = entries[-1]
            for other in reversed(entries[:-1]):
                entry = self.emit(("split", other, entry))
            return entry
        _, body, lo, hi = node  # repeat: lo copies, then hi - lo optional ones or a loop
        if hi is None:
            loop = self.emit(("split", -1, then))
            self.program[loop] = ("split", self.build(body, loop), then)
            then = loop
        else:
            for _ in range(hi - lo):
                then = self.emit(("split", self.build(body, then), then))
        for _ in range(lo):
            then = self.build(body, then)
        return then

    def emit(self, op: tuple) -> int:
        self.program.append(op)
        return len(self.program) - 1


def size(node: tuple) -> int:
    """The states `build` emits for `node`, computed without emitting them."""
    kind = node[0]
    if kind in ("char", "start", "end"):
        return 1
    if kind in ("cat", "alt"):
        return sum(map(size, node[1])) + (len(node[1]) - 1 if kind == "alt" else 0)
    _, body, lo, hi = node
    extra = 1 if hi is None else hi - lo
    return size(body) * (lo + extra) + extra


class Parser:
    """Recursive descent over one pattern: alternation of sequences of quantified atoms."""

    def __init__(self, pattern: str, key: str):
        self.text, self.key, self.at, self.depth = pattern, key, 0, 0

    def refuse(self, what: str, at: int | None = None):
        where = self.at if at is None else at
        raise ConfigError(f"{self.key} {short(self.text)} has {what} at character {where + 1}; {SUBSET}")

    def peek(self, n: int = 1) -> str:
        return self.text[self.at : self.at + n]

    def parse(self) -> tuple:
        tree = self.alternation()
        if self.at < len(self.text):  # only a ")" stops the outermost alternation early
            self.refuse("a ) that closes no group")
        return tree

    def alternation(self) -> tuple:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            branches.append(self.sequence())
        return ("alt", branches) if len(branches) > 1 else branches[0]

    def sequence(self) -> tuple:
        items = []
        while self.at < len(self.text) and self.peek() not in "|)":
            items.append(self.quantified(self.atom()))
        return ("cat", items)

    def atom(self) -> tuple:
        start, c = self.at, self.peek()
        self.at += 1
        if c == "(":
            return self.group(start)
        if c == "[":
            return self.char_class(start)
        if c == "\\":
            escaped = self.escape(in_class=False)
            return (
                escaped
                if isinstance(escaped, tuple)
                else ("char", escaped.__eq__ if isinstance(escaped, str) else escaped)
            )
        if c in QUANTIFIERS or (c == "{" and self.counted(start) is not None):
            self.refuse(f"a {c} that repeats nothing", start)
        if c == ".":
            return ("char", lambda x: x != "\n")
        if c in "^$":
            return ("start",) if c == "^" else ("end",)
        return ("char", c.__eq__)

    def group(self, start: int) -> tuple:
        if self.peek(2) == "?:":
            self.at += 2
        elif self.peek() == "?":
            self.refuse(f"{self.text[start : start + 3]} (a lookaround, flag or named group)", start)
        self.depth += 1
        if self.depth > MAX_NESTING:
            self.refuse(f"groups nested deeper than {MAX_NESTING}", start)
        inner = self.alternation()
        if self.peek() != ")":
            self.refuse("a ( it never closes", start)
        self.at += 1
        self.depth -= 1
        return ("cat", [inner])

    def escape(self, in_class: bool) -> str | Callable[[str], bool] | tuple:
        """What follows a backslash: one character, the test of a class (\\d), or an anchor (\\A, \\Z)."""
        start, c = self.at - 1, self.peek()
        self.at += 1
        if not c:
            self.refuse("a \\ that escapes nothing", start)
        if c in CLASSES:
            return CLASSES[c]
        if c in CONTROLS:
            return CONTROLS[c]
        if c in "AZ" and not in_class:
            return ("start",) if c == "A" else ("end",)
        if c.isascii() and c.isalnum():
            self.refuse(f"\\{c} ({'a backreference' if c.isdigit() else 'an escape it does not take'})", start)
        return c

    def char_class(self, start: int) -> tuple:
        negated = self.peek() == "^"
        self.at += negated
        tests: list[Callable[[str], bool]] = []
        while not tests or self.peek() != "]":  # a ] first is a member
            if not self.peek():
                self.refuse("a [ it never closes", start)
            lo = self.class_member()
            if self.peek() == "-" and self.peek(2) not in ("-", "-]"):
                self.at += 1
                hi = self.class_member()
                if not (isinstance(lo, str) and isinstance(hi, str)) or lo > hi:
                    self.refuse("a bad range in a class", start)
                tests.append(lambda x, lo=lo, hi=hi: lo <= x <= hi)
            else:
                tests.append(lo.__eq__ if isinstance(lo, str) else lo)
        self.at += 1
        return ("char", lambda x: any(test(x) for test in tests) != negated)

    def class_member(self) -> str | Callable[[str], bool]:
        """One character of a class, or the test of a \\d-like escape in it."""
        c = self.peek()
        self.at += 1
        return self.escape(in_class=True) if c == "\\" else c

    def quantified(self, atom: tuple) -> tuple:
        start, c = self.at, self.peek()
        if c in QUANTIFIERS:
            self.at += 1
            lo, hi = QUANTIFIERS[c]
        elif c == "{" and (counts := self.counted(start)) is not None:
            lo, hi = counts
        else:
            return atom
        if atom[0] in ("start", "end"):
            self.refuse("a quantifier on an anchor", start)
        if self.peek() == "?":  # lazy: the same names match
            self.at += 1
        elif self.peek() == "+":
            self.refuse("a possessive quantifier", self.at)
        if self.peek() in QUANTIFIERS or (self.peek() == "{" and self.counted(self.at, move=False) is not None):
            self.refuse("a repetition repeated", self.at)
        return ("repeat", atom, lo, hi)

    def counted(self, start: int, move: bool = True) -> tuple[int, int | None] | None:
        """{m}, {m,}, {,n} or {m,n} at `start` (after it, where `move`), as Python reads them; None where the
        brace is a plain character ({} or {x})."""
        at = start + 1
        lo = self.digits(at)
        at += len(lo)
        comma = self.text[at : at + 1] == ","
        hi = self.digits(at + 1) if comma else lo
        at += comma + (len(hi) if comma else 0)
        if self.text[at : at + 1] != "}" or not (lo or comma):
            return None
        if any(int(n) > MAX_COUNT for n in (lo, hi) if n):
            self.refuse(f"a count above {MAX_COUNT}", start)
        low, high = int(lo or 0), int(hi) if hi else None
        if high is not None and low > high:
            self.refuse("a count whose minimum exceeds its maximum", start)
        if move:
            self.at = at + 1
        return low, high

    def digits(self, at: int) -> str:
        """The ASCII digits from `at` on (at most MAX_PATTERN of them: the pattern's length)."""
        end = at
        while self.text[end : end + 1] in tuple("0123456789"):
            end += 1
        return self.text[at:end]


@dataclass(frozen=True)
class NamePatterns:
    """A schema rule: at most MAX_PATTERNS names or globs of at most MAX_PATTERN characters each, or (where
    `regex`) one string that is a regular expression of the subset NamePattern takes."""

    regex: bool = False

    def check(self, value: Any, key: str, base: type) -> None:
        if isinstance(value, str) and self.regex:
            NamePattern(value, key)
            return
        items = [value] if isinstance(value, str) else value
        if len(items) > MAX_PATTERNS:
            raise ConfigError(f"{key} lists {len(items):,} patterns; at most {MAX_PATTERNS}")
        long = next((i for i, item in enumerate(items) if len(item) > MAX_PATTERN), None)
        if long is not None:
            raise ConfigError(f"{key}[{long}] is {len(items[long]):,} characters long; at most {MAX_PATTERN}")
