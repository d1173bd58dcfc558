"""Clients that go away, against a real `encdec serve`: gone as the headers arrive, before their body is sent,
while queued, mid-stream and mid-beam. Each gives back its place and its rows, its work stops within steps,
the server logs no traceback, and the next request still equals `encdec generate` on its input alone."""

import json
import time

import pytest
from server_kit import call, metric, post_raw, serving, tiny_model_dir
from test_server import generate_alone

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

TOKENS = 3000  # each long request asks this many tokens: far more than it gets before its client goes
LONG = {"max_new_tokens": TOKENS, "min_new_tokens": TOKENS}
HANG = 120  # seconds: only a server that never frees a place takes this long, however loaded the machine


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("gone") / "t5")


@pytest.fixture(scope="module")
def server(model_dir):
    yield from serving(model_dir, "--max-queue", "2", "--max-batch-rows", "4", "--max-new-tokens", str(TOKENS))


def until(condition, what: str) -> None:
    deadline = time.monotonic() + HANG
    while not condition():
        assert time.monotonic() < deadline, f"the server never {what}"
        time.sleep(0.01)


def body(options: dict, text: str = "A man rides a bike.") -> bytes:
    return json.dumps({"inputs": text, "parameters": options}).encode()


def settled(server) -> None:
    """Every place and row given back."""
    until(lambda: metric(server.url, "encdec_queue_depth") == 0, "gave back the places of the requests gone")
    until(lambda: metric(server.url, "encdec_running_slots") == 0, "freed the rows of the requests gone")
    assert metric(server.url, "encdec_waiting_requests") == 0


def still_serves(server, model_dir, tmp_path) -> None:
    text, options = "Two dogs play in the snow.", {"max_new_tokens": 8}
    status, answer, _ = call(server.url + "/generate", {"inputs": text, "parameters": options})
    assert status == 200 and answer["generated_text"] == generate_alone(model_dir, text, options, tmp_path)


def test_streams_whose_clients_go_as_the_headers_arrive_give_back_their_places(server, model_dir, tmp_path):
    steps = metric(server.url, "encdec_decoder_steps_total")
    for _ in range(3):  # more than --max-queue: a place kept by any of them would make the next one a 503
        connection = post_raw(server.port, "/generate_stream", body(LONG))
        assert connection.recv(12) == b"HTTP/1.1 200"
        connection.close()
        settled(server)
    assert metric(server.url, "encdec_decoder_steps_total") - steps < 3 * TOKENS
    still_serves(server, model_dir, tmp_path)


def test_a_stream_closed_mid_stream_stops_its_generation(server, model_dir, tmp_path):
    steps = metric(server.url, "encdec_decoder_steps_total")
    connection = post_raw(server.port, "/generate_stream", body(LONG | {"do_sample": True, "seed": 1}))
    received = b""
    while received.count(b"data: ") < 3:
        received += connection.recv(4096)
    connection.close()
    settled(server)
    assert metric(server.url, "encdec_decoder_steps_total") - steps < TOKENS
    still_serves(server, model_dir, tmp_path)


@pytest.mark.parametrize(
    "path, asked",
    [
        ("/", {"inputs": "A man rides a bike.", "parameters": LONG | {"details": True}, "stream": True}),
        (
            "/v1/completions",
            {"prompt": "A man rides a bike.", "max_tokens": TOKENS, "temperature": 0, "logprobs": 2, "stream": True},
        ),
        (
            "/v1/completions",
            {"prompt": "A man rides a bike.", "max_tokens": TOKENS, "n": 2, "seed": 1, "temperature": 0.05},
        ),
    ],
    ids=["tgi-stream", "openai-stream", "openai-n-samples"],
)
def test_the_clients_apis_give_back_their_rows_when_the_client_goes(server, model_dir, tmp_path, path, asked):
    steps = metric(server.url, "encdec_decoder_steps_total")
    connection = post_raw(server.port, path, json.dumps(asked).encode())
    if asked.get("stream"):
        received = b""
        while received.count(b"data: ") < 3:  # mid-stream
            received += connection.recv(4096)
    else:
        until(lambda: metric(server.url, "encdec_decoder_steps_total") > steps + 2, "started the samples")
    connection.close()
    settled(server)
    assert metric(server.url, "encdec_decoder_steps_total") - steps < TOKENS
    still_serves(server, model_dir, tmp_path)


def test_a_beam_request_whose_client_goes_mid_beam_frees_its_rows(server, model_dir, tmp_path):
    steps = metric(server.url, "encdec_decoder_steps_total")
    connection = post_raw(server.port, "/generate", body(LONG | {"num_beams": 4}))
    until(lambda: metric(server.url, "encdec_decoder_steps_total") > steps + 2, "started the beam request")
    connection.close()
    settled(server)
    assert metric(server.url, "encdec_decoder_steps_total") - steps < TOKENS
    still_serves(server, model_dir, tmp_path)


def test_a_request_whose_client_goes_while_it_waits_to_join_leaves_the_queue(server, model_dir, tmp_path):
    running = post_raw(server.port, "/generate", body(LONG | {"num_beams": 4}))  # every row of the batch
    until(lambda: metric(server.url, "encdec_running_slots") == 4, "started the first request")
    waiting = post_raw(server.port, "/generate", body(LONG), declared=None)
    until(lambda: metric(server.url, "encdec_waiting_requests") == 1, "queued the second request")
    waiting.close()
    until(lambda: metric(server.url, "encdec_waiting_requests") == 0, "took the gone request off the queue")
    assert metric(server.url, "encdec_running_slots") == 4  # the first runs on
    running.close()
    settled(server)
    still_serves(server, model_dir, tmp_path)


def test_a_client_gone_before_its_body_arrived_is_never_admitted(server, model_dir, tmp_path):
    whole = body({"max_new_tokens": 4})
    connection = post_raw(server.port, "/generate", whole[:10], declared=len(whole))
    time.sleep(0.2)  # the server is reading the body (a shorter wait tests the same path, a step earlier)
    connection.close()
    settled(server)
    errors = call(server.url + "/metrics")[1]
    assert 'status="500"' not in errors
    still_serves(server, model_dir, tmp_path)
