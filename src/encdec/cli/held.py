"""Library output held back until encdec speaks: a refused command's stderr is its one `encdec: error:` line.

While a command runs, stderr is a `HeldStderr`. What encdec writes there (its log records, its progress bars,
its messages) goes out at once; what a library writes (torch's warning before it refuses a pickle, the
`datasets` logger's errors before a corrupt parquet file is refused, a `datasets` progress bar) waits, and
goes out in its order just before encdec's next output, or when the command ends. A command that ends in a
refusal (an EncdecError, the system's OSError, Ctrl-C) drops it: the sentence says what went wrong.

Whose a write is, the stack says: the innermost frame outside the plumbing that carries text to stderr
(logging, warnings, tqdm, threading) is encdec's code or a library's. Output written to file descriptor 2
by C++ code passes by Python and is not held.
"""

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

PLUMBING = ("logging", "warnings", "tqdm", "threading", "contextlib", __name__)
MAX_HELD = 1 << 20  # characters: a library that says more goes out at once (no refusal's preamble is that long)


def is_encdec_s(frame: FrameType | None) -> bool:
    """Whether the innermost frame from `frame` outward that is not PLUMBING runs encdec's code."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not any(module == name or module.startswith(name + ".") for name in PLUMBING):
            return module == "encdec" or module.startswith("encdec.")
        frame = frame.f_back
    return False  # a thread a library started (tqdm's monitor) runs no encdec frame


class HeldStderr:
    """A text stream over `stream` that holds libraries' writes until encdec's next one (see the module)."""

    def __init__(self, stream):
        self.stream = stream
        self.held: list[str] = []
        self.size = 0  # characters held
        self.holding = True
        self.lock = threading.RLock()  # data-loading threads and tqdm's monitor write too

    def write(self, text: str) -> int:
        with self.lock:
            if self.holding and not is_encdec_s(sys._getframe(1)):
                self.held.append(text)
                self.size += len(text)
                if self.size > MAX_HELD:
                    self._write_held()
                return len(text)
            self._write_held()
            return self.stream.write(text)

    def flush(self) -> None:
        with self.lock:
            if not self.held:
                self.stream.flush()

    def _write_held(self) -> None:
        if self.held:
            self.stream.write("".join(self.held))
            self.held.clear()
            self.size = 0

    def release(self) -> None:
        """Write what is held, and hold nothing from now on."""
        with self.lock:
            if self.holding:
                self.holding = False
                self._write_held()
                self.stream.flush()

    def drop(self) -> None:
        """Forget what is held (a refusal's sentence stands alone), and hold nothing from now on."""
        with self.lock:
            self.held.clear()
            self.holding = False

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ...: the stream's own
        return getattr(self.stream, name)


@contextmanager
def library_output_held() -> Iterator[HeldStderr]:
    """sys.stderr as a HeldStderr while the block runs; what it holds is written at the end unless dropped."""
    held = HeldStderr(sys.stderr)
    sys.stderr = held
    try:
        yield held
    finally:
        if sys.stderr is held:
            sys.stderr = held.stream
        try:
            held.release()
        except (OSError, ValueError):  # the stream is closed (a reader that went away)
            pass


def say_unless_refused(line: str) -> None:
    """One line of encdec's on stderr (which checkpoint a command opened) that goes out with encdec's next
    output there or when the command ends, and is dropped where the command is refused: the refusal's
    sentence stands alone."""
    stream = sys.stderr
    if isinstance(stream, HeldStderr):
        with stream.lock:
            if stream.holding:
                stream.held.append(line + "\n")
                stream.size += len(line) + 1
                return
    print(line, file=sys.stderr)
