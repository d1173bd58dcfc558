"""A request whose client is gone stops at the next step boundary on every path (before it starts, waiting to
join, mid-search, mid-beam, served alone), gives back its rows, and leaves the others' tokens as `generate`
alone makes them."""

import threading
import time

import pytest
import torch
from test_scheduler import model_of

from encdec.generation.generate import generate
from encdec.serving.scheduler import Abandoned, Scheduler

LONG = {"max_new_tokens": 400, "min_new_tokens": 400}  # far more steps than any test waits for
HANG = 120  # seconds: only a scheduler that never answers takes this long, on any machine


def until(condition, what: str) -> None:
    deadline = time.monotonic() + HANG
    while not condition():
        assert time.monotonic() < deadline, f"the scheduler hung: {what}"
        time.sleep(0.002)


class Request(threading.Thread):
    """scheduler.run in a thread of its own, with its own `gone` event; `.out` or `.error` once joined."""

    def __init__(self, scheduler: Scheduler, source: torch.Tensor, options: dict, gone: threading.Event | None = None):
        super().__init__()
        self.scheduler, self.source, self.options = scheduler, source, options
        self.gone, self.out, self.error = gone or threading.Event(), None, None
        self.start()

    def run(self):
        try:
            self.out = self.scheduler.run(self.source, None, dict(self.options), self.gone)
        except Exception as error:
            self.error = error

    def leave(self) -> None:
        self.gone.set()
        self.scheduler.wake()
        self.join(HANG)
        assert not self.is_alive(), "the abandoned request's thread did not end"


@pytest.fixture
def model():
    return model_of("t5-tiny")


def source(n: int, seed: int) -> torch.Tensor:
    return torch.randint(2, 300, (1, n), generator=torch.Generator().manual_seed(seed))


def test_a_request_whose_client_is_already_gone_does_no_work(model):
    scheduler = Scheduler(model)
    gone = threading.Event()
    gone.set()
    with pytest.raises(Abandoned):
        scheduler.run(source(5, 0), None, {"max_new_tokens": 5}, gone)
    scheduler.stop(timeout=30)
    assert scheduler.steps == 0 and scheduler.batch.rows == 0


@pytest.mark.parametrize("preset", ["t5-tiny", "ar_encdec-tiny"])
def test_a_greedy_request_gone_mid_search_stops_within_a_step_and_frees_its_rows(preset):
    model = model_of(preset)
    scheduler = Scheduler(model)
    other = source(7, 1), {"max_new_tokens": 12}
    seen, gone = [], threading.Event()

    def streamer(tokens):  # the client goes after its third token, from the scheduler's own thread
        seen.append(tokens)
        if len(seen) == 3:
            gone.set()

    longest = {"max_new_tokens": 100, "min_new_tokens": 100}  # within a research model's 128 positions
    request = Request(scheduler, source(9, 0), longest | {"streamer": streamer}, gone)
    beside = Request(scheduler, *other)
    request.join(HANG), beside.join(HANG)
    scheduler.stop(timeout=30)
    assert isinstance(request.error, Abandoned) and len(seen) <= 4  # noticed at the next step boundary
    assert torch.equal(beside.out, generate(model, other[0], None, **other[1]))
    assert scheduler.batch.rows == 0 and scheduler.steps < longest["max_new_tokens"]


def test_a_beam_request_gone_mid_beam_ends_its_thread_and_frees_its_rows(model):
    scheduler = Scheduler(model)
    request = Request(scheduler, source(9, 0), LONG | {"num_beams": 4})
    until(lambda: scheduler.steps >= 3, "the beam request never stepped")
    request.leave()
    assert isinstance(request.error, Abandoned)
    until(lambda: scheduler.batch.rows == 0, "the abandoned beams kept their rows")
    steps = scheduler.steps
    after = source(6, 2), {"max_new_tokens": 6, "num_beams": 2}
    assert torch.equal(scheduler.run(after[0], None, dict(after[1])), generate(model, after[0], None, **after[1]))
    scheduler.stop(timeout=30)
    assert steps < LONG["max_new_tokens"]


def test_a_request_gone_while_waiting_to_join_leaves_the_queue_and_the_running_one_is_untouched(model):
    scheduler = Scheduler(model, max_rows=4)
    running = source(9, 0), {"max_new_tokens": 60, "min_new_tokens": 60, "num_beams": 4}
    first = Request(scheduler, *running)
    until(lambda: scheduler.batch.rows == 4, "the first request never took its rows")
    waiting = Request(scheduler, source(5, 1), {"max_new_tokens": 5})  # no row is free: it waits
    until(lambda: len(scheduler.starts) == 1, "the second request never queued")
    waiting.leave()
    assert isinstance(waiting.error, Abandoned) and len(scheduler.starts) == 0
    first.join(HANG)
    scheduler.stop(timeout=30)
    assert torch.equal(first.out, generate(model, running[0], None, **running[1]))
    assert scheduler.batch.rows == 0


def test_a_request_of_a_family_served_alone_stops_at_its_next_step():
    model = model_of("rnn_seq2seq-tiny")
    scheduler = Scheduler(model)
    seen, gone = [], threading.Event()

    def streamer(tokens):
        seen.append(tokens)
        if len(seen) == 3:
            gone.set()

    longest = {"max_new_tokens": 100, "min_new_tokens": 100}  # within the research model's 128 positions
    request = Request(scheduler, source(9, 0), longest | {"streamer": streamer}, gone)
    request.join(HANG)
    assert isinstance(request.error, Abandoned) and len(seen) == 3
    after = source(6, 2), {"max_new_tokens": 6}
    assert torch.equal(scheduler.run(after[0], None, dict(after[1])), generate(model, after[0], None, **after[1]))
    scheduler.stop(timeout=30)
    assert not scheduler.batched and scheduler.serving_one == 0
