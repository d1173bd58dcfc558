"""Fuzzing a real `encdec serve` process: any JSON body to either route, and any bytes framed as HTTP/1.1 (or
not), are answered with a 2xx or a 4xx JSON sentence (or, for a request cut short, the connection closed),
never a 5xx, a plain-text page or a traceback, and the server answers the next request."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_kit import call, exchange, metric, serving, tiny_model_dir
from test_request_fuzz import parameters, values

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
ROUTES = ["/generate", "/generate_stream", "/health", "/metrics", "/", "/nothing"]

surrogates = st.characters(categories=["Cs"])
lone_surrogate = st.builds(lambda a, s, b: a + s + b, st.text(max_size=8), surrogates, st.text(max_size=8))
texts = st.one_of(st.text(max_size=40), st.text(st.one_of(st.characters(), surrogates), max_size=8), lone_surrogate)
valid_parameters = st.fixed_dictionaries(  # options a request may well hold, so that many bodies generate
    {},
    optional={
        "max_new_tokens": st.integers(1, 6),
        "num_beams": st.integers(1, 3),
        "do_sample": st.booleans(),
        "seed": st.integers(0, 2**31),
        "top_k": st.integers(1, 50),
        "details": st.booleans(),
        "cross_attention": st.booleans(),
    },
)
bodies = st.one_of(
    values,
    st.fixed_dictionaries({"inputs": st.one_of(texts, st.lists(texts, max_size=5), values)}),
    st.fixed_dictionaries({"inputs": texts, "parameters": parameters}),
    st.fixed_dictionaries({"inputs": st.one_of(texts, st.lists(texts, min_size=1, max_size=3))}),
    st.fixed_dictionaries({"inputs": texts, "parameters": valid_parameters}),
)
header_names = st.one_of(
    st.sampled_from([b"Content-Length", b"Transfer-Encoding", b"Content-Type", b"Host", b"Expect", b"Connection"]),
    st.binary(min_size=1, max_size=12),
)
header_values = st.one_of(
    st.sampled_from([b"-5", b"0", b"10", b"1" * 40, b"chunked", b"gzip, chunked", b"100-continue", b"close"]),
    st.binary(max_size=20),
)


@st.composite
def raw_requests(draw) -> bytes:
    """An HTTP/1.1 request, well or badly framed: its request line, header lines and body drawn, then maybe
    one stretch of its bytes replaced."""
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"\x16\x03\x01", b"POST /x"]))
    target = draw(st.sampled_from([r.encode() for r in ROUTES] + [b"*", b"http://x/generate", b"/%00"]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9", b""]))
    headers = draw(st.lists(st.tuples(header_names, header_values), max_size=6))
    body = draw(st.one_of(st.binary(max_size=80), bodies.map(lambda b: json.dumps(b).encode())))
    lines = [method + b" " + target + b" " + version, b"Host: test"] + [n + b": " + v for n, v in headers]
    data = b"\r\n".join(lines) + b"\r\n\r\n" + body
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=8)) + data[at + draw(st.integers(0, 8)) :]
    return data


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = tiny_model_dir(tmp_path_factory.mktemp("fuzzed") / "t5")
    # the model's default max_new_tokens is 20: bounds that let a request without options generate
    yield from serving(model, "--max-new-tokens", "20", "--max-inputs", "4", "--max-input-chars", "64")


def check_answer(answer: bytes) -> None:
    """A response of status < 500 whose error, if any, is a JSON sentence; or nothing (a request cut short)."""
    if not answer:
        return
    head, _, rest = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 "), answer[:200]
    status = int(status_line.split()[1])
    assert status < 500, answer[:300]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in header_lines)}
    if status >= 400:
        assert headers.get(b"content-type") == b"application/json", answer[:300]
        error = json.loads(rest[: int(headers[b"content-length"])])
        assert set(error) == {"error"} and "\n" not in error["error"] and "Traceback" not in error["error"]


def test_any_json_body_to_a_real_server_is_answered_or_refused_in_a_sentence(server):
    @FUZZ
    @given(body=bodies, route=st.sampled_from(["/generate", "/generate_stream"]))
    def one(body, route):
        status, answer, headers = call(server.url + route, json.dumps(body).encode())
        assert status < 500, answer
        if status >= 400:
            assert set(answer) == {"error"} and "\n" not in answer["error"], answer
        elif route == "/generate":
            assert "generated_text" in (answer if isinstance(answer, dict) else answer[0])
        else:
            events = [json.loads(line[6:]) for line in answer.splitlines() if line.startswith("data: ")]
            assert events and events[-1].get("generated_text") is not None, answer  # the last token's event

    one()
    assert call(server.url + "/health")[0] == 200


def test_any_bytes_framed_as_http_are_answered_as_json_or_closed_and_the_server_answers_on(server):
    @FUZZ
    @given(data=raw_requests())
    def one(data):
        check_answer(exchange(server.port, data))
        assert call(server.url + "/health")[0] == 200

    one()
    assert metric(server.url, "encdec_queue_depth") == 0
