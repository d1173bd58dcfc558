"""Bounds on the work code does instead of on the wall clock: a loaded machine stretches seconds, never counts.

`counted_calls()` counts the functions called inside a block, Python's and C's (sys.setprofile's `call` and
`c_call` events), so a read that loops per byte, per token or per retry shows as calls whatever the load; and,
apart, the calls of the Python functions it is given (the modules a model builds: nn.Module.__init__), for a
bound on the work per unit of what was asked for. `run_bounded` runs a child process with its processor time
bounded instead of its wall-clock time.
"""

import resource
import subprocess
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


HANG = 3600  # seconds: a child that has not ended by then is stuck, not slow (none of them needs a tenth of it)


def run_bounded(argv: list[str], cpu_seconds: int, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, capture_output=True, text=True)` with the child's processor time bounded
    (RLIMIT_CPU: SIGXCPU past `cpu_seconds` of its own user and system time), not its wall-clock time, which a
    loaded machine stretches; the wall clock only catches a hang, at HANG seconds."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))

    return subprocess.run(argv, capture_output=True, text=True, preexec_fn=limit, timeout=HANG, **kwargs)
