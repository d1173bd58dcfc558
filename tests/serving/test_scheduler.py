"""Continuous batching: under concurrent mixed requests every request's tokens equal `generate` on its input
alone, rows are freed as requests finish and reused by later ones, and a failing request fails alone."""

import random
import threading
import time

import pytest
import torch

import encdec
from encdec.generation import STRATEGIES, GenerationConfig, strategy_for
from encdec.generation.generate import generate
from encdec.serving.scheduler import Scheduler


def model_of(preset: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return encdec.build_model(encdec.preset(preset, vocab_size=300, pad_id=0, eos_id=1, decoder_start_id=0)).eval()


def mixed_requests(n: int, seed: int = 0) -> list[tuple[torch.Tensor, dict]]:
    """Greedy, beam 4 and seeded sampling; short and long sources; short and long outputs."""
    rng = random.Random(seed)
    requests = []
    for i in range(n):
        source = torch.randint(2, 300, (1, rng.choice([3, 8, 20, 40])), generator=torch.Generator().manual_seed(i))
        options = {"max_new_tokens": rng.choice([4, 12, 30])}
        options |= [{}, {"num_beams": 4}, {"do_sample": True, "seed": i, "top_k": 20}][i % 3]
        if i % 7 == 0:
            options |= {"num_return_sequences": 2, "num_beams": 4} if i % 3 == 1 else {}
        requests.append((source, options))
    return requests


def serve_together(scheduler: Scheduler, requests) -> list:
    results = [None] * len(requests)

    def one(i):
        source, options = requests[i]
        results[i] = scheduler.run(source, None, dict(options))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


BATCHED = ["t5-tiny", "rot5-tiny", "transformer-tiny", "decoder_only-tiny", "ar_encdec-tiny", "parallel_encdec-tiny"]


@pytest.mark.parametrize("preset", BATCHED)
def test_thirty_two_concurrent_mixed_requests_each_equal_generate_alone(preset):
    model = model_of(preset)
    requests = mixed_requests(32)
    alone = [generate(model, source, None, **options) for source, options in requests]
    scheduler = Scheduler(model, max_rows=64)
    try:
        served = serve_together(scheduler, requests)
    finally:
        scheduler.stop(timeout=30)
    assert all(torch.equal(s, a) for s, a in zip(served, alone, strict=True))
    assert scheduler.steps < sum(o["max_new_tokens"] for _, o in requests) / 4  # steps were shared
    assert scheduler.batch.rows == 0  # every row freed


def test_a_short_request_finishes_while_a_long_one_runs_and_its_rows_are_reused():
    model = model_of("t5-tiny")
    scheduler = Scheduler(model, max_rows=4)
    long_source, short_source = torch.randint(2, 300, (1, 30)), torch.randint(2, 300, (1, 5))
    finished = {}

    def run(name, source, options):
        out = scheduler.run(source, None, options)
        finished[name] = (time.perf_counter(), out)

    long = threading.Thread(target=run, args=("long", long_source, {"max_new_tokens": 200, "eos_token_id": None}))
    long.start()
    while scheduler.batch.rows == 0:
        time.sleep(0.001)
    shorts = [
        threading.Thread(target=run, args=(f"short{i}", short_source, {"max_new_tokens": 3, "num_beams": 3}))
        for i in range(3)
    ]
    for thread in shorts:
        thread.start()
        thread.join(timeout=60)  # one at a time: each needs 3 of the 3 rows the long request leaves free
    deadline = time.perf_counter() + 10
    while scheduler.batch.rows != 1 and time.perf_counter() < deadline:  # their rows leave at the next boundary
        time.sleep(0.001)
    assert "long" not in finished and scheduler.batch.rows == 1  # the shorts came and went beside it
    long.join(timeout=120)
    scheduler.stop(timeout=30)
    assert all(finished[f"short{i}"][0] < finished["long"][0] for i in range(3))
    assert torch.equal(finished["long"][1], generate(model, long_source, None, max_new_tokens=200, eos_token_id=None))
    expected = generate(model, short_source, None, max_new_tokens=3, num_beams=3)
    assert all(torch.equal(finished[f"short{i}"][1], expected) for i in range(3))


def test_a_request_that_fails_fails_alone():
    model = model_of("t5-tiny")
    scheduler = Scheduler(model)
    good = torch.randint(2, 300, (1, 6))
    bad = torch.tensor([[5, 6, 7000]])  # a token id beyond the vocabulary: refused before it is encoded
    with pytest.raises(encdec.errors.DataError, match="input token ids must lie in"):
        scheduler.run(bad, None, {"max_new_tokens": 3})
    out = scheduler.run(good, None, {"max_new_tokens": 5})
    scheduler.stop(timeout=30)
    assert torch.equal(out, generate(model, good, None, max_new_tokens=5))


def test_a_greedy_request_whose_streamer_fails_fails_alone_beside_those_sharing_its_steps():
    model = model_of("t5-tiny")
    scheduler = Scheduler(model)
    requests = mixed_requests(6, seed=3)
    for _, options in requests:
        options.pop("num_beams", None), options.pop("num_return_sequences", None)
    seen = []

    def streamer(tokens):
        seen.append(tokens)
        if len(seen) == 3:
            raise RuntimeError("the client went away")

    failing = (torch.randint(2, 300, (1, 9)), {"max_new_tokens": 20, "eos_token_id": None, "streamer": streamer})
    errors, outputs = [], [None] * len(requests)

    def run(i, source, options):
        try:
            out = scheduler.run(source, None, dict(options))
        except RuntimeError as error:
            errors.append(str(error))
            return
        if i >= 0:
            outputs[i] = out

    threads = [threading.Thread(target=run, args=(-1, *failing))]
    threads += [threading.Thread(target=run, args=(i, *request)) for i, request in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    scheduler.stop(timeout=30)
    assert errors == ["the client went away"] and len(seen) == 3
    alone = [generate(model, source, None, **options) for source, options in requests]
    assert all(torch.equal(s, a) for s, a in zip(outputs, alone, strict=True))
    assert scheduler.batch.rows == 0


def test_models_without_a_decode_state_are_served_one_at_a_time():
    model = model_of("rnn_seq2seq-tiny")
    scheduler = Scheduler(model)
    requests = mixed_requests(6)
    served = serve_together(scheduler, requests)
    assert not scheduler.batched
    assert all(torch.equal(s, generate(model, src, None, **o)) for s, (src, o) in zip(served, requests))


def test_the_scheduler_thread_loads_the_model_it_serves_and_a_failed_load_is_raised_to_the_caller():
    loaded_in = []

    def load():
        loaded_in.append(threading.current_thread())
        return model_of("t5-tiny")

    scheduler = Scheduler(load)
    source = torch.randint(2, 300, (1, 6))
    out = scheduler.run(source, None, {"max_new_tokens": 4})
    scheduler.stop(timeout=30)
    assert loaded_in == [scheduler.thread]  # one thread made the model and computes with it
    assert torch.equal(out, generate(scheduler.model, source, None, max_new_tokens=4))

    def refuse():
        raise encdec.errors.ConfigError("no model here")

    with pytest.raises(encdec.errors.ConfigError, match="no model here"):
        Scheduler(refuse)


SEARCHES = {  # a config that selects each entry of generation's strategy table
    "greedy": {},
    "sampling": {"do_sample": True, "seed": 3, "top_k": 20},
    "beam search": {"num_beams": 3, "num_return_sequences": 2},
    "diverse beam search": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5},
}


def test_every_search_of_the_strategy_table_is_served_as_generate_runs_it():
    """The scheduler asks generation which search a request runs (generation.strategies): each entry of the
    table, served, gives generate's tokens on that input alone."""
    assert set(SEARCHES) == {strategy.name for strategy in STRATEGIES}
    model = model_of("t5-tiny")
    scheduler = Scheduler(model)
    source = torch.randint(2, 300, (1, 9), generator=torch.Generator().manual_seed(5))
    try:
        for name, options in SEARCHES.items():
            options = {"max_new_tokens": 8, **options}
            assert strategy_for(GenerationConfig.from_options(None, **options)).name == name
            assert torch.equal(scheduler.run(source, None, dict(options)), generate(model, source, None, **options)), (
                name
            )
    finally:
        scheduler.stop(timeout=30)


@pytest.mark.parametrize(
    "options, says",
    [
        ({"decoder_input_ids": torch.tensor([[0, 5, 6]])}, "a decoder prefix"),
        ({"compile": True}, "compile is not served"),
    ],
)
def test_what_the_server_cannot_step_is_refused_in_one_sentence(options, says):
    scheduler = Scheduler(model_of("t5-tiny"))
    try:
        with pytest.raises(encdec.errors.ConfigError, match=says):
            scheduler.run(torch.randint(2, 300, (1, 5)), None, {"max_new_tokens": 4, **options})
    finally:
        scheduler.stop(timeout=30)
