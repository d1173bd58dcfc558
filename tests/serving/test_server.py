"""`encdec serve`, a real server process: 32 concurrent mixed requests each equal `encdec generate` on that input
alone, streaming gives the same text token by token, bad requests are one-sentence 4xx (503 when the queue is
full), /metrics speaks Prometheus, and SIGTERM finishes the requests in flight before exiting 0."""

import gzip
import http.client
import json
import signal
import threading
import time

import pytest
from server_kit import Served, call, tiny_model_dir

from encdec.cli import main

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

OPTION_FLAGS = {"max_new_tokens": "--max-new-tokens", "num_beams": "--num-beams", "seed": "--seed", "top_k": "--top-k"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("served") / "t5")


@pytest.fixture
def sentences(shared_data):
    with gzip.open(shared_data / "translation/multi30k/test_2016_flickr.en.gz", "rt", encoding="utf-8") as handle:
        return [line.strip() for line in handle][:32]


@pytest.fixture(scope="module")
def server(model_dir):
    served = Served(model_dir)
    yield served
    served.stop()


def mixed(i: int) -> dict:
    """Greedy, beam 4 (two returned) and seeded sampling; short and long outputs."""
    options = {"max_new_tokens": (6, 20, 40)[i % 3]}
    return options | [{}, {"num_beams": 4}, {"do_sample": True, "seed": i, "top_k": 20}][(i // 3) % 3]


def generate_alone(model_dir, text: str, options: dict, tmp_path) -> str:
    """What `encdec generate` writes for `text` alone with `options`."""
    source, out = tmp_path / f"in{id(options)}.txt", tmp_path / f"out{id(options)}.jsonl"
    source.write_text(text + "\n")
    flags = [
        item for name, value in options.items() if name in OPTION_FLAGS for item in (OPTION_FLAGS[name], str(value))
    ]
    flags += ["--do-sample"] if options.get("do_sample") else []
    assert main(["generate", str(model_dir), "-i", str(source), "-o", str(out), "--format", "jsonl", *flags]) == 0
    return json.loads(out.read_text())["output"]


def test_thirty_two_concurrent_mixed_requests_each_equal_generate_alone(server, model_dir, sentences, tmp_path):
    answers = [None] * len(sentences)

    def ask(i):
        answers[i] = call(server.url + "/generate", {"inputs": sentences[i], "parameters": mixed(i)})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(sentences))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert all(status == 200 for status, _, _ in answers), answers
    for i, (_, answer, _) in enumerate(answers):
        assert answer["generated_text"] == generate_alone(model_dir, sentences[i], mixed(i), tmp_path), i
    steps = [
        float(line.split()[-1])
        for line in call(server.url + "/metrics")[1].splitlines()
        if line.startswith("encdec_decoder_steps_total")
    ]
    assert steps and steps[0] < sum(mixed(i)["max_new_tokens"] for i in range(32)) / 3  # the requests shared steps


def test_a_batch_of_inputs_details_and_beam_alternatives(server, model_dir, sentences, tmp_path):
    status, answer, _ = call(server.url + "/generate", {"inputs": sentences[:3], "parameters": {"max_new_tokens": 8}})
    assert status == 200 and [a["generated_text"] for a in answer] == [
        generate_alone(model_dir, s, {"max_new_tokens": 8}, tmp_path) for s in sentences[:3]
    ]
    parameters = {
        "max_new_tokens": 8,
        "num_beams": 4,
        "num_return_sequences": 3,
        "details": True,
        "cross_attention": True,
    }
    status, answer, _ = call(server.url + "/generate", {"inputs": sentences[0], "parameters": parameters})
    details = answer["details"]
    assert status == 200 and len(details["alternatives"]) == 3
    assert details["alternatives"][0]["generated_text"] == answer["generated_text"]
    scores = [a["score"] for a in details["alternatives"]]
    assert scores == sorted(scores, reverse=True) and details["finish_reason"] in ("eos_token", "length")
    maps = answer["cross_attention"]
    layers, heads = len(maps["weights"]), len(maps["weights"][0])
    assert (layers, heads) == (2, 4) and len(maps["weights"][0][0]) == len(maps["target_tokens"]) == details[
        "generated_tokens"
    ]
    for row in (row for layer in maps["weights"] for head in layer for row in head):
        assert len(row) == len(maps["source_tokens"]) and abs(sum(row) - 1) < 2e-3


def test_streaming_sends_each_token_then_the_text_generate_writes(server, model_dir, sentences, tmp_path):
    options = {"max_new_tokens": 12, "do_sample": True, "seed": 3}
    request = urllib_stream(server.url + "/generate_stream", {"inputs": sentences[1], "parameters": options})
    events = [json.loads(line[len("data: ") :]) for line in request if line.startswith("data: ")]
    tokens, last = events[:-1], events[-1]
    assert tokens and all(e["token"]["id"] >= 0 and e["generated_text"] is None for e in tokens)
    assert last["generated_text"] == generate_alone(model_dir, sentences[1], options, tmp_path)
    assert last["token"]["id"] >= 0 and last["index"] == len(events)  # TGI: the last token carries the text
    assert [e["index"] for e in events] == list(range(1, len(events) + 1))
    assert "".join(e["token"]["text"] for e in events).strip() == last["generated_text"]


def urllib_stream(url: str, body: dict) -> list[str]:
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        return response.read().decode().splitlines()


@pytest.mark.parametrize(
    "body, status, says",
    [
        (b"{not json", 400, "the request body is not valid JSON"),
        (b"x" * (2 << 20), 413, "the request body is more than 1,048,576 bytes"),
        ({"inputs": ["a"] * 33}, 422, "a request holds at most 32 inputs, got 33"),
        ({"inputs": "a", "parameters": {"max_new_tokenz": 3}}, 422, "unknown parameter 'max_new_tokenz'; did you mean"),
        ({"inputs": "a", "parameters": {"max_new_tokens": -3}}, 422, "max_new_tokens must be"),
        ({"inputs": "a", "parameters": {"num_beams": 100}}, 422, "num_beams is 100; this server allows at most 8"),
        ({"inputs": "", "parameters": {}}, 422, "input 0 is empty"),
        ({"inputs": 5}, 422, "inputs must be a text or a non-empty list of texts"),
        ({"inputs": "a", "model": "../../etc/passwd"}, 422, "unknown field 'model'"),
        ({"inputs": "a", "parameters": {"details": "yes"}}, 422, "parameters.details must be true or false"),
    ],
)
def test_a_bad_request_is_a_4xx_with_one_sentence(server, body, status, says):
    got, answer, _ = call(server.url + "/generate", body)
    assert got == status and set(answer) == {"error"} and says in answer["error"], answer
    assert "\n" not in answer["error"] and "Traceback" not in answer["error"]


def test_a_body_declared_far_too_large_is_refused_before_any_of_it_is_sent(server):
    """Content-Length of 10^12 bytes and no body: a 413 at once (nothing is waited for, read or allocated)."""
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest("POST", "/generate")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(10**12))
    connection.endheaders()
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()
    assert response.status == 413 and answer == {"error": "the request body is more than 1,048,576 bytes"}


def test_streaming_beams_is_refused(server):
    got, answer, _ = call(server.url + "/generate_stream", {"inputs": "a", "parameters": {"num_beams": 2}})
    assert got == 422 and "use /generate for beams" in answer["error"]


def test_metrics_and_health(server):
    status, health, _ = call(server.url + "/health")
    assert status == 200 and health["status"] == "ok"
    status, text, headers = call(server.url + "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for name in (
        "encdec_requests_total",
        "encdec_queue_depth",
        "encdec_running_slots",
        "encdec_tokens_per_second",
        "encdec_request_latency_seconds_bucket",
        "encdec_generated_tokens_total",
    ):
        assert name in text


def long_request(url: str, results: list) -> threading.Thread:
    """A request that decodes 500 tokens with 8 beams (EOS forbidden until then), answered into `results`;
    returns once it runs."""
    parameters = {"max_new_tokens": 500, "min_new_tokens": 500, "num_beams": 8}
    body = {"inputs": "A long one.", "parameters": parameters}
    thread = threading.Thread(target=lambda: results.append(call(url + "/generate", body)))
    thread.start()
    deadline = time.time() + 60
    while time.time() < deadline and "encdec_running_slots 8.0" not in call(url + "/metrics")[1]:
        time.sleep(0.01)
    return thread


def test_a_full_queue_is_503_with_retry_after(model_dir):
    served = Served(model_dir, "--max-queue", "1")
    try:
        results = []
        thread = long_request(served.url, results)
        status, answer, headers = call(served.url + "/generate", {"inputs": "one more"})
        assert status == 503 and headers["retry-after"] == "1" and "the server is busy" in answer["error"]
        thread.join(timeout=300)
        assert results[0][0] == 200
    finally:
        served.stop()


def test_sigterm_finishes_the_requests_in_flight_and_exits_zero(model_dir):
    served = Served(model_dir)
    results = []
    thread = long_request(served.url, results)
    served.process.send_signal(signal.SIGTERM)
    thread.join(timeout=300)
    code, err = served.stop()
    assert results and results[0][0] == 200 and len(results[0][1]["generated_text"]) > 0
    assert code == 0 and "Traceback" not in err
    with pytest.raises(OSError):
        call(served.url + "/health", timeout=5)
