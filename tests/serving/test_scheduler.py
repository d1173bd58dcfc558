"""Continuous batching: under concurrent mixed requests every request's tokens equal `generate` on its input
alone, rows are freed as requests finish and reused by later ones, and a failing request fails alone."""

import random
import statistics
import sys
import threading
import time

import pytest
import torch

import encdec
from encdec.generation import STRATEGIES, GenerationConfig, strategy_for
from encdec.generation.generate import generate, prepare
from encdec.serving.greedy_rows import served_here
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


def token_words(rows: torch.Tensor) -> list[str]:
    """Token rows as texts of one word a token id: MBR's decoding without a tokenizer."""
    return [" ".join(map(str, row.tolist())) for row in rows]


SEARCHES = {  # a config that selects each entry of generation's strategy table
    "greedy": {},
    "sampling": {"do_sample": True, "seed": 3, "top_k": 20},
    "beam search": {"num_beams": 3, "num_return_sequences": 2},
    "diverse beam search": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5},
    "temperature fallback": {"temperature": [0.0, 0.5], "compression_ratio_threshold": 0.001, "seed": 3},
    "minimum Bayes risk": {"do_sample": True, "seed": 3, "mbr": 4, "mbr_decode": token_words},
}


def test_every_search_of_the_strategy_table_is_served_as_generate_runs_it():
    """The scheduler asks generation which search a request runs (generation.strategies): each entry of the
    table, served, gives generate's tokens on that input alone."""
    assert set(SEARCHES) == {strategy.name for strategy in STRATEGIES if not strategy.drafted}  # a draft: generate's
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


def python_calls_per_step(scheduler: Scheduler, rows: int, tokens: int = 48) -> list[int]:
    """The scheduler's own Python calls (functions and builtins, the model's forward left out: its kernels'
    choice may depend on the rows) in each decoder step it ran at `rows` rows, with `rows` greedy requests of
    `tokens` new tokens running together; counted in the scheduler's thread."""
    counts, step, model = [], scheduler._step, scheduler.model
    forward, inside = model.step, [False]

    def forward_uncounted(tokens, state):
        inside[0] = True
        try:
            return forward(tokens, state)
        finally:
            inside[0] = False

    def counted(steps):
        calls = [0]

        def count(frame, event, arg):
            calls[0] += not inside[0] and event in ("call", "c_call")

        at = scheduler.batch.rows
        sys.setprofile(count)  # this thread's alone
        try:
            step(steps)
        finally:
            sys.setprofile(None)
        counts.append((at, calls[0]))

    admit, admitted = scheduler._admit, [False]

    def admit_together():  # the first admission waits for every request: they join as one, on a loaded machine too
        for _ in range(60_000):
            if admitted[0] or len(scheduler.arrived) >= rows:
                break
            time.sleep(0.001)
        admitted[0] = True
        admit()

    scheduler._step, scheduler._admit, model.step = counted, admit_together, forward_uncounted
    requests = [(torch.randint(2, 300, (1, 6)), {"max_new_tokens": tokens, "min_new_tokens": tokens})] * rows
    try:
        serve_together(scheduler, requests)
    finally:
        del scheduler._step, scheduler._admit, model.step
    return [calls for at, calls in counts if at == rows]


def test_a_step_of_greedy_rows_makes_as_many_python_calls_at_four_rows_as_at_forty():
    """The running batch's greedy rows are searched on the device (serving.greedy_rows): a step's own Python is
    the same whatever the rows, so its host time does not grow with them."""
    scheduler = Scheduler(model_of("t5-tiny"), max_rows=64)
    try:
        few, many = python_calls_per_step(scheduler, 4), python_calls_per_step(scheduler, 40)
    finally:
        scheduler.stop(timeout=30)
    assert len(few) >= 4 and len(many) >= 4  # steps with every request running
    # the steps in which no request finishes (most): the same calls; one that finishes some adds theirs
    assert statistics.mode(many) == statistics.mode(few) == min(many) == min(few)


def greedy_mix(n: int) -> list[tuple[torch.Tensor, dict]]:
    """Greedy requests the device searches (serving.greedy_rows): of every length, EOS on or off or several,
    min_new_tokens, forced first and last tokens, some streaming."""
    rng = random.Random(1)
    requests = []
    for i in range(n):
        source = torch.randint(2, 300, (1, rng.choice([3, 9, 25])), generator=torch.Generator().manual_seed(100 + i))
        options = {"max_new_tokens": rng.choice([1, 2, 5, 17, 40])}
        options |= rng.choice([{}, {"eos_token_id": None}, {"eos_token_id": [1, 7, 9]}, {"min_new_tokens": 3}])
        options |= rng.choice([{}, {}, {"forced_bos_token_id": 5}, {"forced_eos_token_id": 1}])
        requests.append((source, options))
    return requests


def test_greedy_rows_that_finish_leave_mid_batch_and_the_others_go_on_each_equal_to_generate_alone():
    """Greedy rows searched on the device beside beam and sampled requests (whose rows move as others leave):
    every request's tokens are generate's on its input alone, and a streamer sees each of its tokens once."""
    model = model_of("t5-tiny")
    requests = greedy_mix(24) + mixed_requests(9, seed=5)
    assert all(served_here(prepare(model, source, None, **options)) for source, options in requests[:24])
    streamed = {i: [] for i in range(0, 24, 3)}
    for i, seen in streamed.items():
        requests[i][1]["streamer"] = seen.append
    alone = [generate(model, source, None, **{k: v for k, v in o.items() if k != "streamer"}) for source, o in requests]
    scheduler = Scheduler(model, max_rows=16)  # fewer rows than requests: rows freed mid-batch are taken again
    try:
        served = serve_together(scheduler, requests)
    finally:
        scheduler.stop(timeout=30)
    assert all(torch.equal(s, a) for s, a in zip(served, alone, strict=True))
    for i, seen in streamed.items():
        assert torch.equal(torch.cat(seen), alone[i][0, 1:])
    assert scheduler.batch.rows == 0 and not scheduler.greedy and not scheduler.rows.capacity


@pytest.mark.parametrize(
    "options",
    [
        {"do_sample": True, "seed": 1},
        {"num_beams": 2},
        {"repetition_penalty": 1.3},
        {"no_repeat_ngram_size": 2},
        {"bad_words_ids": [[5]]},
        {"suppress_tokens": [4]},
        {"output_scores": True, "return_dict_in_generate": True},
        {"max_new_tokens": 5000},
    ],
)
def test_a_greedy_request_that_asks_for_more_runs_its_own_search_and_still_equals_generate(options):
    model = model_of("t5-tiny")
    source = torch.randint(2, 300, (1, 7), generator=torch.Generator().manual_seed(3))
    options = {"max_new_tokens": 6, **options}
    assert not served_here(prepare(model, source, None, **options))
    scheduler = Scheduler(model)
    try:
        out = scheduler.run(source, None, dict(options))
    finally:
        scheduler.stop(timeout=30)
    expected = generate(model, source, None, **options)
    if options.get("return_dict_in_generate"):
        assert torch.equal(out.sequences, expected.sequences) and len(out.scores) == len(expected.scores)
    else:
        assert torch.equal(out, expected)


def test_a_step_that_fails_fails_the_greedy_requests_in_it_and_the_next_ones_are_served():
    model = model_of("t5-tiny")
    scheduler = Scheduler(model)
    forward, calls = model.step, [0]

    def failing_once(tokens, state):
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("the device failed")
        return forward(tokens, state)

    model.step = failing_once
    requests = [(torch.randint(2, 300, (1, 6)), {"max_new_tokens": 10, "min_new_tokens": 10})] * 3
    errors = []

    def run(source, options):
        try:
            scheduler.run(source, None, dict(options))
        except RuntimeError as error:
            errors.append(str(error))

    try:
        threads = [threading.Thread(target=run, args=request) for request in requests]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        after = torch.randint(2, 300, (1, 5))
        out = scheduler.run(after, None, {"max_new_tokens": 4})
    finally:
        scheduler.stop(timeout=30)
        del model.step
    assert errors and set(errors) == {"the device failed"}  # those in the failed step; none left waiting
    assert torch.equal(out, generate(model, after, None, max_new_tokens=4))
    assert scheduler.batch.rows == 0 and not scheduler.greedy


def test_a_finished_greedy_row_is_held_until_the_next_join_and_leaves_with_it():
    """A greedy request that finishes beside eight long ones leaves its row held (RunningBatch.hold: stepped, its
    columns not growing), no remove made for it alone; the next request's join takes it out. Each answer is
    generate's alone."""
    model = model_of("t5-tiny")
    scheduler = Scheduler(model, max_rows=16)
    long_options = {"max_new_tokens": 400, "eos_token_id": None}
    sources = [torch.randint(2, 300, (1, 6), generator=torch.Generator().manual_seed(i)) for i in range(10)]
    results = {}
    runners = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, scheduler.run(sources[i], None, dict(long_options))))
        for i in range(8)
    ]
    try:
        for runner in runners:
            runner.start()
        for _ in range(1000):  # scheduler passes, counted: each `exclusive` call runs between two of its steps
            if scheduler.exclusive(lambda: scheduler.batch.rows) >= 8:
                break
        assert scheduler.batch.rows == 8, "the long requests never took their rows"
        short = {"max_new_tokens": 3, "eos_token_id": None}
        first = scheduler.run(sources[8], None, dict(short))
        assert scheduler.batch.rows == 9 and len(scheduler.lingering) == 1  # held: 1 of 9 rows, under a LINGER-th
        assert not results  # the long ones still run beside it
        second = scheduler.run(sources[9], None, dict(short))  # its join takes the held row out
        assert len(scheduler.lingering) == 1 and scheduler.batch.rows == 9  # and it is held in turn
    finally:
        for runner in runners:
            runner.join(timeout=120)
        scheduler.stop(timeout=30)
    assert torch.equal(first, generate(model, sources[8], None, **short))
    assert torch.equal(second, generate(model, sources[9], None, **short))
    for i in range(8):
        assert torch.equal(results[i], generate(model, sources[i], None, **long_options)), i
