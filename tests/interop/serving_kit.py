"""What the families' tests share about serving: requests sent at once to a continuous-batching Scheduler, each
row at its own position, must come back as `encdec.generate` gives each alone."""

import threading

import torch

import encdec
from encdec.serving.scheduler import Scheduler


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
