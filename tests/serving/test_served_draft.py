"""`encdec serve MODEL --draft DRAFT`, a real server: its answers equal `encdec generate` on each input alone, its
/metrics count the drafts checked and accepted, and a speculating request whose client goes gives back its rows."""

import json
import threading

import pytest
from server_kit import call, metric, post_raw, serving, tiny_model_dir
from test_disconnect import LONG, TOKENS, settled, still_serves, until
from test_server import generate_alone, urllib_stream

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
DRAFTED = "encdec_speculative_drafted_total"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("drafted") / "t5")


@pytest.fixture(scope="module")
def server(model_dir):
    draft = tiny_model_dir(model_dir.parent / "draft", seed=1, n_decoder_layers=1)  # the model's width: shares
    options = ["--max-new-tokens", str(TOKENS), "--max-batch-rows", "8"]
    yield from serving(
        model_dir, "--draft", str(draft), "--draft-shares-encoder", "--num-assistant-tokens", "3", *options
    )


def test_served_answers_with_a_draft_equal_encdec_generate_alone(server, model_dir, tmp_path):
    asked = [
        ("A man rides a bike.", {"max_new_tokens": 20}),
        ("Two dogs play in the snow near a tree.", {"max_new_tokens": 7}),
        ("Hi.", {"max_new_tokens": 13, "num_beams": 2}),  # not speculated: steps beside
        ("A woman reads.", {"max_new_tokens": 11, "do_sample": True, "seed": 4, "top_k": 5}),
    ]
    answers = [None] * len(asked)

    def ask(i):
        text, options = asked[i]
        answers[i] = call(server.url + "/generate", {"inputs": text, "parameters": options})

    drafted = metric(server.url, DRAFTED)
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(asked))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for (text, options), (status, answer, _) in zip(asked[:3], answers[:3]):
        assert status == 200 and answer["generated_text"] == generate_alone(model_dir, text, options, tmp_path)
    assert answers[3][0] == 200  # sampled through the draft: of the model's law, not its draws
    assert metric(server.url, DRAFTED) > drafted
    assert metric(server.url, "encdec_speculative_accepted_total") >= 0


def test_a_speculating_request_whose_client_goes_gives_back_its_rows(server, model_dir, tmp_path):
    steps, drafted = (metric(server.url, name) for name in ("encdec_decoder_steps_total", DRAFTED))
    connection = post_raw(server.port, "/generate", json.dumps({"inputs": "A man.", "parameters": LONG}).encode())
    until(lambda: metric(server.url, DRAFTED) > drafted + 6, "ran speculative rounds of the request")
    connection.close()
    settled(server)
    assert metric(server.url, "encdec_decoder_steps_total") - steps < TOKENS
    still_serves(server, model_dir, tmp_path)


def test_a_speculated_stream_sends_each_kept_token_with_its_log_probability(server, model_dir, tmp_path):
    text, options = "A dog runs on the beach.", {"max_new_tokens": 14, "details": True}
    drafted = metric(server.url, DRAFTED)
    lines = urllib_stream(server.url + "/", {"inputs": text, "parameters": options, "stream": True})  # TGI's, scored
    events = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
    assert metric(server.url, DRAFTED) > drafted  # it was speculated
    assert events[-1]["generated_text"] == generate_alone(model_dir, text, {"max_new_tokens": 14}, tmp_path)
    assert [e["index"] for e in events] == list(range(1, len(events) + 1))
    assert all(e["token"]["logprob"] is not None and e["token"]["logprob"] <= 0 for e in events)
