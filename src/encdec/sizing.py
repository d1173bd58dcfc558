"""Chinchilla compute-optimal sizing (Hoffmann et al. 2022), as ROT5 used it (SEEDS.md section 2).

    N_opt(C) = 0.6 * C^0.45      optimal parameters for C training FLOPs
    D_opt(C) = 0.3 * C^0.55      optimal training tokens for C training FLOPs

Given any one of C, D or N, the other two follow from these fits. The common
approximation C ~ 6 * N * D (forward and backward FLOPs of a dense transformer)
is reported beside them; the fits give N * D = 0.18 C, so 6 * N * D = 1.08 C.

What the machine offers, which sizes are checked against before anything is allocated:
`free_bytes(device)` (the memory free on the CPU or a GPU), `available_cores()`, and
`capped_to_cores`, which caps a thread or worker count at the cores with one warning, and
`warn_if_oversubscribed`, which warns where other processes leave fewer cores free than threads asked.
"""

import ctypes
import ctypes.util
import functools
import logging
import math
import os
import time
from dataclasses import dataclass

from encdec.errors import ConfigError

log = logging.getLogger(__name__)

N_COEF, N_EXP = 0.6, 0.45
D_COEF, D_EXP = 0.3, 0.55
# the compute the fits size, and the tokens and parameters they give at its ends: past 1e30 FLOPs (10^5 times
# the largest runs of 2024) a fit's power overflows before long (1e200 tokens did), below 1 FLOP nothing is sized
MIN_FLOPS, MAX_FLOPS = 1.0, 1e30
MIN_TOKENS, MAX_TOKENS = D_COEF * MIN_FLOPS**D_EXP, D_COEF * MAX_FLOPS**D_EXP
MIN_PARAMS, MAX_PARAMS = N_COEF * MIN_FLOPS**N_EXP, N_COEF * MAX_FLOPS**N_EXP


@dataclass
class ChinchillaPoint:
    flops: float
    params: float
    tokens: float

    @property
    def flops_6nd(self) -> float:
        return 6.0 * self.params * self.tokens


def chinchilla(flops: float | None = None, tokens: float | None = None, params: float | None = None) -> ChinchillaPoint:
    """The compute-optimal point from exactly one of FLOPs, tokens or parameters, each within the range the
    fits size (MIN_FLOPS to MAX_FLOPS, and the tokens and parameters they give)."""
    given = [x for x in (flops, tokens, params) if x is not None]
    if len(given) != 1:
        raise ConfigError("give exactly one positive value: FLOPs, tokens or parameters")
    for value, what, lo, hi in (
        (flops, "FLOPs", MIN_FLOPS, MAX_FLOPS),
        (tokens, "tokens", MIN_TOKENS, MAX_TOKENS),
        (params, "parameters", MIN_PARAMS, MAX_PARAMS),
    ):
        if value is not None and not (math.isfinite(value) and lo <= value <= hi):
            raise ConfigError(f"the Chinchilla fits size {lo:.3g} to {hi:.3g} {what}, got {value:.3g}")
    if tokens is not None:
        flops = (tokens / D_COEF) ** (1 / D_EXP)
    elif params is not None:
        flops = (params / N_COEF) ** (1 / N_EXP)
    return ChinchillaPoint(flops, N_COEF * flops**N_EXP, D_COEF * flops**D_EXP)


# /proc/meminfo's MemAvailable is read again once older than this many seconds: a server checks each request
# against it, and the read (an open, a read and a close, each letting Python's lock go to the thread that steps,
# and a parse of some 50 lines) took 22 of a request's 150 us of checks, alone
MEMINFO_AGE = 0.1
_mem_available: list = [0.0, None]  # [time.monotonic() of the read, bytes]


def free_bytes(device) -> int | None:
    """Memory free for this process on `device` (a torch.device or its name): a GPU's free memory, the
    CPU's MemAvailable (else the free pages os.sysconf reports); None where it cannot be told."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] if torch.cuda.is_available() else None
    if device.type != "cpu":
        return None
    read_at, available = _mem_available
    if available is not None and time.monotonic() - read_at < MEMINFO_AGE:
        return available
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        _mem_available[:] = [time.monotonic(), int(fields["MemAvailable"].split()[0]) * 1024]
        return _mem_available[1]
    except (OSError, KeyError, ValueError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library is not glibc (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError, TypeError):
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Give the free pages of the C heap back to the system (glibc's malloc_trim(0)), which glibc otherwise
    keeps in its arenas for the process; False where the C library has no such call, or while torch.compile traces
    (a host call, not a step of the graph: the compiled step's memory is its allocator's)."""
    import torch

    if torch.compiler.is_compiling():
        return False
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def gib(n: float) -> str:
    """A byte count for a sentence: "37.3 GiB", in scientific notation past a million GiB."""
    value = n / 2**30
    return f"{value:,.1f} GiB" if value < 1e6 else f"{value:.1e} GiB"


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def busy_cores(window: float = 0.25) -> float | None:
    """Cores other processes keep busy now: the machine's CPU time over `window` seconds (Linux's /proc/stat),
    during which this process sleeps; None where the system does not say. A load average would count this
    process too, and a job that ended a minute ago."""

    def times() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:9]]  # user nice system idle iowait irq ...
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    try:
        busy, total = times()
        time.sleep(window)
        busy_after, total_after = times()
    except (OSError, ValueError, IndexError):
        return None
    if total_after <= total:
        return None
    return (busy_after - busy) / (total_after - total) * (os.cpu_count() or 1)


def warn_if_oversubscribed(threads: int, key: str, busy: float | None = None) -> bool:
    """One warning, and True, where `threads` exceed the cores other processes leave free (`busy`, measured
    by busy_cores when not given): torch's threads then wait on each other at every operation, and steps
    took 5 to 20 times longer on a 2-core machine shared with other jobs (encdec demo: 12.4 s with 2
    threads against 2.4 s with 1)."""
    busy = busy_cores() if busy is None else busy
    if busy is None or threads <= 1:
        return False
    cores = os.cpu_count() or 1
    free = max(1, round(cores - busy))
    if threads <= free:
        return False
    log.warning(
        "other processes keep %.1f of this machine's %d cores busy: %d torch threads would wait on each other "
        "and run many times slower; set %s to %d, or free the cores",
        busy,
        cores,
        threads,
        key,
        free,
    )
    return True


def choose_threads(asked: int | None, key: str, kept: int | None = None, processes: int = 1) -> int | None:
    """The torch threads to compute with: `asked` (capped at the cores), else `kept` (a resumed run's own, so
    that it repeats bitwise), else, where OMP_NUM_THREADS does not say, the cores other processes leave free
    now (busy_cores) shared among this machine's `processes`; None: leave torch's (OMP_NUM_THREADS). A count
    above the free cores is warned about; one chosen here is said."""
    if asked or kept:
        threads = capped_to_cores(asked, key) if asked else min(kept, available_cores())
        warn_if_oversubscribed(threads, key)
        return threads
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    busy = busy_cores()
    cores = available_cores()
    free = cores if busy is None else max(1, min(cores, round((os.cpu_count() or 1) - busy)))
    threads = max(1, free // max(1, processes))
    log.info(
        "%s not set: %d thread%s, the cores other processes leave free (%s busy of %d)",
        key,
        threads,
        "" if threads == 1 else "s",
        "unknown" if busy is None else f"{busy:.1f}",
        os.cpu_count() or 1,
    )
    return threads


def capped_to_cores(value: int, key: str) -> int:
    """`value` threads or processes, capped at the cores with one warning naming `key`: more than the
    machine has only contend for the same cores."""
    cores = available_cores()
    if value <= cores:
        return value
    log.warning("%s is %s but this machine has %d cores: using %d", key, f"{value:,}", cores, cores)
    return cores
