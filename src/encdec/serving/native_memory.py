"""A long-running server's memory held near what it uses: two bounds found by soaking `encdec serve`.

A soak of 10,000 /generate requests from 64 clients (t5-tiny, greedy and seeded sampling mixed) took the
server's resident memory from 586 to 866 MiB, still rising. Python's own objects did not grow (tracemalloc:
2.5 MiB in all, the one unbounded list being the tokens-per-second window, now tallies by the second); what
grew was native memory, in two parts:

- oneDNN's primitive cache. torch runs CPU linear layers as oneDNN inner products, one primitive (its JIT
  kernel and buffers) per distinct shape, cached up to 1,024. A server's encoder passes come in as many
  shapes as its joins have token counts, so the cache filled towards that bound: 80 MiB of live memory at
  the tiny model's widths, more at a real one's. PRIMITIVE_CACHE bounds it; making a primitive anew is cheap
  beside the pass (141 against 147 requests/s with and without the cache, the same figures within noise).
- glibc malloc keeps what the request threads free in their arenas (100-200 MiB after the soak;
  malloc_trim(0) gave back 200 MiB of 800). `Trimmer` calls it every TRIM_EVERY answered requests.

Figures and the command of the soak test that bounds the slope: docs/benchmarks.md ("Server memory").
"""

from __future__ import annotations

import logging
import os
import threading
import time

from encdec.sizing import release_free_memory

log = logging.getLogger(__name__)

PRIMITIVE_CACHE = 64  # oneDNN primitives kept (its default: 1,024); the hot decoder-step shapes stay
TRIM_EVERY = 512  # answered requests between two malloc_trim calls


def bound_primitive_cache() -> None:
    """Bound oneDNN's primitive cache for this process, unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set. oneDNN
    reads it when it makes its first primitive: call this before the model first computes."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(PRIMITIVE_CACHE))


class Trimmer:
    """Counts answered requests; every TRIM_EVERY of them gives the free pages of malloc's arenas back to the
    system, in the calling thread (a request's worker thread, never the event loop)."""

    def __init__(self, every: int = TRIM_EVERY):
        self.every, self.count, self.lock = every, 0, threading.Lock()

    def answered(self) -> None:
        with self.lock:
            self.count += 1
            due = self.count % self.every == 0
        if due:
            started = time.perf_counter()
            release_free_memory()
            log.debug("malloc_trim after %d requests took %.1f ms", self.count, 1e3 * (time.perf_counter() - started))
