"""A server's option sets resolved once (serving.resolved_options): each request gets its own config equal to
`resolve_config`'s, a set that is refused is refused every time, values of other types never share a key, and
the kept sets are bounded."""

import pytest
import torch

import encdec
from encdec.errors import ConfigError
from encdec.generation.generate import resolve_config
from encdec.serving import resolved_options
from encdec.serving.resolved_options import ResolvedOptions, plain_key


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return encdec.build_model(encdec.preset("t5-tiny", vocab_size=300, pad_id=0, eos_id=1, decoder_start_id=0)).eval()


def test_a_repeated_set_gives_each_request_a_config_of_its_own_equal_to_resolve_config(model):
    resolved = ResolvedOptions(model)
    options = {"max_new_tokens": 12, "eos_token_id": [1, 5], "defaults": {"num_beams": 1}, "tokenizer": None}
    first, second = resolved(options), resolved(dict(options))
    expected = resolve_config(model, {"max_new_tokens": 12, "eos_token_id": [1, 5]}, {"num_beams": 1})
    assert first is not second and first == expected and second == expected and len(resolved.sets) == 1
    first.forced_bos_token_id = 7  # what prepare sets on a request's own config
    assert resolved(options).forced_bos_token_id is None


def test_a_refused_set_is_refused_every_time_and_never_kept(model):
    resolved = ResolvedOptions(model)
    for _ in range(2):
        with pytest.raises(ConfigError, match="max_new_tokens"):
            resolved({"max_new_tokens": -3})
    assert resolved.sets == {}


def test_values_of_other_types_never_share_a_key(model):
    resolved = ResolvedOptions(model)
    assert resolved({"do_sample": True, "seed": 1}).do_sample is True
    with pytest.raises(ConfigError, match="do_sample"):
        resolved({"do_sample": 1, "seed": 1})  # 1 == True, but only True is a boolean
    assert plain_key({"a": 1}) != plain_key({"a": True}) != plain_key({"a": 1.0})
    assert plain_key([1, 2]) != plain_key((1, 2))


def test_sets_holding_objects_are_resolved_each_time_and_the_kept_sets_are_bounded(model, monkeypatch):
    resolved = ResolvedOptions(model)

    def streamer(tokens):  # a request's own callable
        return None

    assert resolved({"max_new_tokens": 4, "streamer": streamer}).streamer is streamer and resolved.sets == {}
    monkeypatch.setattr(resolved_options, "MOST_SETS", 3)
    for length in range(1, 8):
        assert resolved({"max_new_tokens": length}).max_new_tokens == length
    assert len(resolved.sets) == 3
