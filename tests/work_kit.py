"""Bounds on the work code does instead of on the wall clock: a loaded machine stretches seconds, never counts.

`counted_calls()` counts the functions called inside a block, Python's and C's (sys.setprofile's `call` and
`c_call` events), so a read that loops per byte, per token or per retry shows as calls whatever the load; and,
apart, the calls of the Python functions it is given (the modules a model builds: nn.Module.__init__), for a
bound on the work per unit of what was asked for.
"""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType


@dataclass
class Work:
    calls: int = 0
    watched: dict[CodeType, int] = field(default_factory=dict)

    def calls_of(self, function: Callable) -> int:
        """The calls of `function` (one of those counted_calls watched) made in the block."""
        return self.watched[function.__code__]


@contextmanager
def counted_calls(*watched: Callable) -> Iterator[Work]:
    """`with counted_calls() as work: ...`, then `work.calls`: the function calls made in the block."""
    work = Work(watched={function.__code__: 0 for function in watched})

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            work.calls += 1
            if event == "call" and frame.f_code in work.watched:
                work.watched[frame.f_code] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield work
    finally:
        sys.setprofile(previous)
