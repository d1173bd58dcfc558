"""Speculative decoding inside the continuous batch (serving.speculative_rows): a served greedy request with a
draft equals plain greedy `generate` on its input alone and the server without a draft, alone and beside others of
other lengths; each row keeps its own accepted count; requests that do not speculate step as before; a request
gone mid-round gives back its rows."""

import pytest
import torch
from test_abandon import HANG, Request, source, until
from test_scheduler import model_of

from encdec.errors import ConfigError
from encdec.generation.generate import generate
from encdec.models import build_model, preset
from encdec.serving.scheduler import Abandoned, Scheduler
from encdec.serving.speculative_rows import ServedDraft
from tests.generation.draft_kit import near_copy


@pytest.fixture(scope="module")
def model():
    return model_of("t5-tiny")


def together(scheduler: Scheduler, requests: list[tuple[torch.Tensor, dict]]) -> list:
    """Each request's output (return_dict_in_generate), all run at once."""
    threads = [Request(scheduler, src, options | {"return_dict_in_generate": True}) for src, options in requests]
    for thread in threads:
        thread.join(HANG)
        assert thread.error is None, thread.error
    return [thread.out for thread in threads]


REQUESTS = [  # sources and outputs of different lengths, one with processors, one shorter than a round
    (source(5, 0), {"max_new_tokens": 24}),
    (source(17, 1), {"max_new_tokens": 9}),
    (source(3, 2), {"max_new_tokens": 31}),
    (source(40, 3), {"max_new_tokens": 15, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2}),
    (source(8, 4), {"max_new_tokens": 2}),
    (source(11, 5), {"max_new_tokens": 20, "min_new_tokens": 20}),
]


@pytest.mark.parametrize("shares_encoder", [True, False])
def test_served_greedy_requests_with_a_draft_equal_generate_alone_one_and_many(model, shares_encoder):
    scheduler = Scheduler(model, max_rows=16, draft=ServedDraft(near_copy(model), shares_encoder, 3))
    plain = Scheduler(model, max_rows=16)
    try:
        alone = together(scheduler, REQUESTS[:1])[0]
        assert torch.equal(alone.sequences, generate(model, REQUESTS[0][0], None, **REQUESTS[0][1]))
        outs, without = together(scheduler, REQUESTS), together(plain, REQUESTS)
    finally:
        scheduler.stop(timeout=HANG), plain.stop(timeout=HANG)
    for (src, options), out, served in zip(REQUESTS, outs, without):
        assert torch.equal(out.sequences, generate(model, src, None, **options))
        assert torch.equal(out.sequences, served.sequences)
        assert out.speculative.target_steps <= options["max_new_tokens"]
    # the rows ran side by side, each keeping its own count: their rates differ (one batch rule would tie them)
    rates = {round(out.speculative.tokens_per_step, 3) for out in outs[:4]}
    assert len(rates) > 1
    assert scheduler.spec.rows == 0 and scheduler.batch.rows == 0
    total = scheduler.spec.stats
    assert total.accepted == sum(out.speculative.accepted for out in [alone, *outs]) > 0  # drafts were kept
    assert total.target_steps < sum(out.sequences.shape[1] - 1 for out in [alone, *outs])


def test_rows_of_one_round_advance_by_their_own_counts(model):
    """Two requests joined in the same round, of equal length, their outputs as generate's: their searches'
    lengths after rounds differ, which one count for the batch would never let happen."""
    scheduler = Scheduler(model, max_rows=8, draft=ServedDraft(near_copy(model, 0.6), True, 4))
    lengths = []

    def watch(tokens):  # the scheduler's thread: after each token, the two searches' lengths
        works = scheduler.spec.works
        if len(works) == 2:
            lengths.append(tuple(work.search.length for work in works))

    requests = [(source(6, 7), {"max_new_tokens": 30}), (source(9, 8), {"max_new_tokens": 30, "streamer": watch})]
    outs = together(scheduler, requests)
    scheduler.stop(timeout=HANG)
    for (src, options), out in zip(requests, outs):
        options = {k: v for k, v in options.items() if k != "streamer"}
        assert torch.equal(out.sequences, generate(model, src, None, **options))
    assert any(a != b for a, b in lengths)
    assert outs[0].speculative.accepted != outs[1].speculative.accepted


def test_requests_that_do_not_speculate_step_beside_those_that_do(model):
    scheduler = Scheduler(model, max_rows=32, draft=ServedDraft(near_copy(model), True, 3))
    requests = [
        (source(7, 10), {"max_new_tokens": 12, "num_beams": 3}),
        (source(9, 11), {"max_new_tokens": 14}),
        (source(4, 12), {"max_new_tokens": 10, "do_sample": True, "seed": 3, "num_return_sequences": 2}),
        (source(12, 13), {"max_new_tokens": 16}),
    ]
    outs = together(scheduler, requests)
    scheduler.stop(timeout=HANG)
    for (src, options), out in zip(requests, outs):
        assert torch.equal(out.sequences, generate(model, src, None, **options))
    assert [out.speculative is not None for out in outs] == [False, True, False, True]


def test_a_draft_equal_to_the_model_has_every_draft_accepted_sampling_too(model):
    scheduler = Scheduler(model, draft=ServedDraft(model, True, 4))
    greedy, sampled = together(
        scheduler,
        [
            (source(6, 20), {"max_new_tokens": 17}),
            (source(6, 21), {"max_new_tokens": 17, "do_sample": True, "seed": 1, "top_k": 20, "eos_token_id": []}),
        ],
    )
    scheduler.stop(timeout=HANG)
    assert torch.equal(greedy.sequences, generate(model, source(6, 20), None, max_new_tokens=17))
    for out in (greedy, sampled):
        assert out.speculative.accepted == out.speculative.drafted > 0
    assert sampled.sequences.shape == (1, 18) and out.speculative.target_steps == 4  # 17 tokens: 5 a round, room


def test_a_speculating_request_gone_mid_request_gives_back_its_rows(model):
    scheduler = Scheduler(model, draft=ServedDraft(near_copy(model), True, 3))
    request = Request(scheduler, source(9, 0), {"max_new_tokens": 400, "min_new_tokens": 400})
    until(lambda: scheduler.spec.stats.target_steps >= 3, "the speculating request never ran a round")
    request.leave()
    assert isinstance(request.error, Abandoned)
    until(lambda: scheduler.spec.rows == 0 and scheduler.spec.rounds.drafts.rows == 0, "its rows were kept")
    rounds = scheduler.spec.stats.target_steps
    after = source(6, 2), {"max_new_tokens": 6}
    assert torch.equal(scheduler.run(after[0], None, dict(after[1])), generate(model, after[0], None, **after[1]))
    scheduler.stop(timeout=HANG)
    assert rounds < 400


def test_a_draft_of_another_vocabulary_is_refused_in_one_sentence_as_the_server_starts(model):
    other = build_model(preset("t5-tiny", vocab_size=301, pad_id=0, eos_id=1, decoder_start_id=0)).eval()
    with pytest.raises(ConfigError, match="^the draft's vocab_size is 301 and the model's 300: a draft must share"):
        Scheduler(model, draft=ServedDraft(other, True, 3))


@pytest.mark.parametrize(
    "fields, says",
    [
        (dict(num_assistant_tokens=0), "^num_assistant_tokens must be a positive integer, got 0$"),
        (dict(num_assistant_tokens=65), "^num_assistant_tokens must be at most 64, got 65$"),  # --num-assistant-tokens'
        (dict(num_assistant_tokens=2.0), "^num_assistant_tokens must be an integer, got 2.0$"),
        (dict(shares_encoder="yes"), "^shares_encoder must be true or false, got 'yes'$"),
        (dict(model="runs/draft"), "^model must be a model \\(torch.nn.Module\\) or a function that loads one"),
    ],
)
def test_a_served_draft_out_of_its_declared_range_is_one_sentence_where_it_is_made(model, fields, says):
    with pytest.raises(ConfigError, match=says):
        ServedDraft(**{"model": model, **fields})
    assert ServedDraft(lambda: model, True, 64).num_assistant_tokens == 64  # the range's end, and a loader, taken
