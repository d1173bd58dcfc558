"""Fuzzing what a server request may hold and `encdec serve`'s numbers: any body is a request or a 4xx with
one sentence, never another exception; any option value is taken or refused in one sentence."""

import json
from dataclasses import fields

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encdec.cli import build_parser
from encdec.errors import ConfigError
from encdec.serving.api_requests import TGI_NAMES, CompletionRequest, completion_request, parse_tgi
from encdec.serving.requests import EXTRAS, OPTIONS, GenerateRequest, Limits, RequestError, parse_body

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = Limits(max_body_bytes=4096, max_inputs=4, max_input_chars=64, max_new_tokens=16, max_beams=4)

values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=False),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
parameters = st.dictionaries(
    st.sampled_from([*OPTIONS, *EXTRAS, "model", "stop", "max_new_tokenz"]), values, max_size=4
)
bodies = st.one_of(
    values,
    st.fixed_dictionaries(
        {"inputs": st.one_of(st.text(max_size=80), st.lists(st.text(max_size=20), max_size=6), values)}
    ),
    st.fixed_dictionaries({"inputs": st.just("A man rides a bike."), "parameters": parameters}),
)


def answered(body: bytes, stream: bool = False, parse=None) -> None:
    """`body` read by `parse` (default /generate's parse_body), taken within the bounds or refused in a 4xx sentence."""
    try:
        if parse is None:
            request = parse_body(body, LIMITS, {"max_new_tokens": 8}, stream=stream)
        else:
            request = parse(body, LIMITS, {"max_new_tokens": 8})
            request = request.request if hasattr(request, "request") else request[0]
    except RequestError as error:
        assert 400 <= error.status < 500 and "\n" not in str(error) and len(str(error)) < 300, str(error)
        return
    assert isinstance(request, GenerateRequest) and 1 <= len(request.inputs) <= LIMITS.max_inputs
    assert all(0 < len(text) <= LIMITS.max_input_chars for text in request.inputs)
    assert request.options.get("max_new_tokens", 8) <= LIMITS.max_new_tokens
    assert request.options.get("num_return_sequences", 1) <= LIMITS.max_beams


@FUZZ
@given(body=bodies, stream=st.booleans())
def test_any_json_body_is_a_request_or_a_4xx_sentence(body, stream):
    answered(json.dumps(body).encode(), stream)


@FUZZ
@given(raw=st.binary(max_size=300))
def test_any_bytes_are_a_request_or_a_4xx_sentence(raw):
    answered(raw)


tgi_parameters = st.dictionaries(st.sampled_from([*OPTIONS, *EXTRAS, *TGI_NAMES, "stopp"]), values, max_size=4)
tgi_bodies = st.one_of(
    values,
    st.fixed_dictionaries(
        {"inputs": st.just("A man rides a bike."), "parameters": tgi_parameters, "stream": st.one_of(values)}
    ),
)
completion_bodies = st.one_of(
    values,
    st.dictionaries(
        st.sampled_from([f.name for f in fields(CompletionRequest)] + ["max_new_tokens"]), values, max_size=5
    ).map(lambda body: {"prompt": "A man rides a bike."} | body),
)


@FUZZ
@given(body=tgi_bodies)
def test_any_body_of_tgi_s_root_is_a_request_or_a_4xx_sentence(body):
    answered(json.dumps(body).encode(), parse=parse_tgi)


@FUZZ
@given(body=completion_bodies)
def test_any_completion_body_is_a_request_or_a_4xx_sentence(body):
    answered(json.dumps(body).encode(), parse=completion_request)


SERVE_NUMBERS = ["--port", "--max-batch-rows", "--max-queue", "--max-inputs", "--max-input-chars", "--max-new-tokens"]
SERVE_NUMBERS += ["--max-beams", "--max-body-bytes", "--max-source-len"]


@FUZZ
@given(
    flag=st.sampled_from(SERVE_NUMBERS), value=st.one_of(st.integers(-(10**20), 10**20).map(str), st.text(max_size=8))
)
def test_every_serve_number_is_taken_within_its_range_or_refused_in_one_sentence(flag, value):
    try:
        args = build_parser().parse_args(["serve", "some/model", flag, value])
    except ConfigError as error:
        assert "\n" not in str(error) and len(str(error)) < 300
        return
    number = getattr(args, flag[2:].replace("-", "_"))
    assert isinstance(number, int) and 0 <= number <= 1 << 30
