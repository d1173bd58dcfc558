"""What the families' tests share about serving: requests sent at once to a continuous-batching Scheduler, each
row at its own position, must come back as `encdec.generate` gives each alone; and requests made to start as one
join, however loaded the machine (`run_together`)."""

import threading
from collections.abc import Callable
from typing import Any

import torch

import encdec
from encdec.serving.scheduler import Scheduler


def mixed(long: int) -> list[tuple[int, dict]]:
    """Three requests of one server batch: 3 tokens greedy, `long` tokens greedy, 8 tokens with four beams."""
    return [(3, {"max_new_tokens": 4}), (long, {"max_new_tokens": 10}), (8, {"max_new_tokens": 9, "num_beams": 4})]


def assert_served_equals_generate_alone(model, ids: tuple[int, int], requests: list[tuple[int, dict]]) -> None:
    """Each (source length, generation options) of `requests` as a source of random ids in [ids[0], ids[1]),
    all in one server batch: each equal to generate on that source alone."""
    sources = [
        (torch.randint(*ids, (1, length), generator=torch.Generator().manual_seed(i)), options)
        for i, (length, options) in enumerate(requests)
    ]
    alone = [encdec.generate(model, source, None, **options) for source, options in sources]
    scheduler = Scheduler(model, max_rows=16)
    served = [None] * len(sources)

    def run(i):
        served[i] = scheduler.run(sources[i][0], None, dict(sources[i][1]))

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sources))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        scheduler.stop(timeout=30)
    assert all(torch.equal(s, a) for s, a in zip(served, alone, strict=True))


def run_together(scheduler: Scheduler, calls: list[Callable[[], Any]]) -> list:
    """Each of `calls` (a request through `scheduler.run`) in a thread of its own, the scheduler's thread held
    until every one waits to start (or has ended without), so that they start as one join whatever the machine's
    load: what each returned, or the exception it raised, in order. Counted, not timed: nothing waits on a clock."""
    results: list = [None] * len(calls)
    ended = [0]
    entered = threading.Event()

    def hold() -> None:  # in the scheduler's thread, between two steps
        entered.set()
        with scheduler.lock:
            # a greedy or sampling request arrives to be checked in the scheduler's thread (Scheduler._admit), the
            # others wait to start: once the hold ends, every one arrived is admitted before the next join
            waiting = lambda: len(scheduler.starts) + len(scheduler.arrived)  # noqa: E731
            scheduler.lock.wait_for(lambda: waiting() + ended[0] >= len(calls))

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as error:
            results[i] = error
        finally:
            with scheduler.lock:
                ended[0] += 1
                scheduler.lock.notify_all()

    holder = threading.Thread(target=scheduler.exclusive, args=(hold,))
    holder.start()
    entered.wait()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in [holder, *threads]:
        thread.join()
    return results
