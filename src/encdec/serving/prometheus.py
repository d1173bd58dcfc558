"""The server's Prometheus metrics (prometheus-client), in a registry of its own:

encdec_requests_total{endpoint, status}   answered requests, refusals included
encdec_queue_depth                        inputs accepted and not yet answered (waiting or running)
encdec_waiting_requests                   requests waiting to join the running batch
encdec_running_slots                      rows of the running decoder batch
encdec_generated_tokens_total             tokens generated, EOS included
encdec_tokens_per_second                  generated tokens a second over the last 10 seconds
encdec_request_latency_seconds            a histogram of request latency
encdec_decoder_steps_total                batched decoder steps run (a speculative round counts one)
encdec_speculative_drafted_total          with --draft: draft tokens the model checked
encdec_speculative_accepted_total         with --draft: those it accepted (their share: the acceptance)
"""

from __future__ import annotations

import threading
import time
from collections import deque

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

WINDOW_SECONDS = 10


class ServerMetrics:
    def __init__(self, scheduler):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("encdec_requests", "requests answered", ["endpoint", "status"], registry=registry)
        self.queue = Gauge("encdec_queue_depth", "inputs accepted and not yet answered", registry=registry)
        waiting = Gauge("encdec_waiting_requests", "requests waiting to join the running batch", registry=registry)
        waiting.set_function(lambda: len(scheduler.starts))
        slots = Gauge("encdec_running_slots", "rows of the running decoder batch", registry=registry)
        slots.set_function(lambda: scheduler.running_rows)
        registry.register(SchedulerSteps(scheduler))
        self.tokens_total = Counter("encdec_generated_tokens", "tokens generated", registry=registry)
        rate = Gauge("encdec_tokens_per_second", "generated tokens a second, last 10 s", registry=registry)
        rate.set_function(self.tokens_per_second)
        self.latency = Histogram(
            "encdec_request_latency_seconds",
            "request latency",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.recent: deque = deque()  # [second, tokens] tallies of the last WINDOW_SECONDS
        self.lock = threading.Lock()
        self.content_type = CONTENT_TYPE_LATEST

    def count_tokens(self, n: int) -> None:
        """Count `n` generated tokens, now, in the current second's tally (the window holds at most
        WINDOW_SECONDS + 1 tallies, however many requests come and whether or not anyone scrapes)."""
        self.tokens_total.inc(n)
        second = int(time.monotonic())
        with self.lock:
            if self.recent and self.recent[-1][0] == second:
                self.recent[-1][1] += n
            else:
                self.recent.append([second, n])
            self._forget(second)

    def tokens_per_second(self) -> float:
        with self.lock:
            self._forget(int(time.monotonic()))
            return sum(n for _, n in self.recent) / WINDOW_SECONDS

    def _forget(self, second: int) -> None:
        """Under the lock: drop the tallies older than the window."""
        while self.recent and self.recent[0][0] <= second - WINDOW_SECONDS:
            self.recent.popleft()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class SchedulerSteps:
    """The scheduler's count of batched decoder steps, and with a draft its speculative totals, read when
    scraped."""

    def __init__(self, scheduler):
        self.scheduler = scheduler

    def collect(self):
        yield CounterMetricFamily("encdec_decoder_steps", "batched decoder steps run", value=self.scheduler.steps)
        if self.scheduler.spec is not None:  # serving.speculative_rows' totals
            stats = self.scheduler.spec.stats
            yield CounterMetricFamily("encdec_speculative_drafted", "draft tokens checked", value=stats.drafted)
            yield CounterMetricFamily("encdec_speculative_accepted", "draft tokens accepted", value=stats.accepted)
