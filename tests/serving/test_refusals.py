"""A refused request against a real `encdec serve`: /generate and /generate_stream check it with the same code
before any byte, so both answer the same 4xx sentence (a stream never starts, never drops its connection);
an input the model itself refuses as it starts (T5Gemma 2's image token) is a 422 on both routes and one
access-log line, with no traceback, and does not fail the requests that joined the batch with it."""

import json
import time
from functools import partial

import pytest
import torch
from run_kit import tiny_pairs_run
from server_kit import Served, call, serving, tiny_model_dir

import encdec
from encdec.errors import DataError
from encdec.generation.generate import SAMPLING_ONLY, generate
from encdec.serving.scheduler import Scheduler
from tests.interop.serving_kit import run_together

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

IMAGE = ord("@")  # the byte tokenizer's id of "@", the image token of the model that refuses it
ON = {"temperature": 0.5, "top_k": 3, "top_p": 0.5, "min_p": 0.1, "typical_p": 0.5, "epsilon_cutoff": 0.1}
ON |= {"eta_cutoff": 0.1}  # a value of each sampling-only option that is not its off value


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tiny_model_dir(tmp_path_factory.mktemp("refused") / "t5"))


def refusals() -> dict[str, dict]:
    """Requests refused after the body's own schema passed: by generate's checks, by the tokenizer."""
    cases = {f"{name} without do_sample": {name: ON[name]} for name in SAMPLING_ONLY}
    cases |= {"an unknown src_lang": {"src_lang": "xx_YY"}, "an unknown tgt_lang": {"tgt_lang": "fra_Latn"}}
    cases |= {"two greedy outputs": {"num_return_sequences": 2}, "too many new tokens": {"max_new_tokens": 10**6}}
    return cases


def test_every_sampling_only_option_is_walked():
    assert set(ON) == set(SAMPLING_ONLY)


@pytest.mark.parametrize("parameters", refusals().values(), ids=refusals().keys())
def test_both_routes_refuse_a_request_alike_before_any_byte(server, parameters):
    body = json.dumps({"inputs": "A man rides a bike.", "parameters": parameters}).encode()
    answers = [call(server.url + route, body) for route in ("/generate", "/generate_stream")]
    (status, answer, _), (stream_status, stream_answer, headers) = answers
    assert 400 <= status < 500 and set(answer) == {"error"} and "\n" not in answer["error"], answer
    assert (stream_status, stream_answer) == (status, answer)
    assert headers["content-type"] == "application/json"  # not an event stream whose only event is the refusal
    log = server.log()
    assert "Traceback" not in log and "response already started" not in log, log[-3000:]


@pytest.fixture(scope="module")
def image_run(tmp_path_factory):
    """A run of 2 steps of a tiny model that refuses inputs holding its image token, as T5Gemma 2 does."""
    return tiny_pairs_run(tmp_path_factory.mktemp("image"), image_token_id=IMAGE)


def access_lines(served: Served) -> list[str]:
    served.out.seek(0)
    return [line for line in served.out.read().splitlines() if '"POST /' in line]


def test_a_text_model_refuses_an_upload_to_the_audio_routes_in_one_sentence(server):
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        body = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF\r\n--b--\r\n'
        status, answer, _ = call(server.url + path, body, {"Content-Type": "multipart/form-data; boundary=b"})
        assert status == 422 and answer["error"] == {  # OpenAI's error object, as on every /v1 route
            "message": "this server's model reads text, not recordings: POST its inputs to /generate",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }


def test_an_input_the_model_refuses_is_a_422_on_both_routes_and_one_log_line(image_run):
    served = Served(image_run)
    try:
        assert call(served.url + "/generate", {"inputs": "fine"})[0] == 200
        for route in ("/generate", "/generate_stream"):
            err, lines = served.log(), len(access_lines(served))
            status, answer, _ = call(served.url + route, {"inputs": "a picture: @"})
            assert status == 422 and "holds the image token" in answer["error"], answer
            for _ in range(3000):  # the access line follows the answer: waited for, not a fixed pause
                if len(access_lines(served)) > lines:
                    break
                time.sleep(0.02)
            assert served.log() == err  # nothing but the access line
            assert len(access_lines(served)) == lines + 1 and " 422" in access_lines(served)[-1]
    finally:
        code, err = served.stop()
    assert code == 0 and "Traceback" not in err, err[-3000:]


def test_a_refused_input_fails_alone_among_the_requests_that_join_with_it():
    """Four requests start in one encoder pass; the model refuses one of them there: that one gets its
    sentence, the three others their tokens, as generate gives each alone."""
    torch.manual_seed(0)
    config = encdec.preset("t5-tiny", vocab_size=300, pad_id=0, eos_id=1, decoder_start_id=0, image_token_id=7)
    model = encdec.build_model(config).eval()
    sources = [torch.tensor([[5, 9, 11, 4]]), torch.tensor([[5, 7, 11]]), torch.tensor([[8, 3]]), torch.tensor([[9]])]
    options = {"max_new_tokens": 6}
    scheduler = Scheduler(model)
    try:  # the four wait together, then start in one encoder pass
        results = run_together(scheduler, [partial(scheduler.run, source, None, dict(options)) for source in sources])
    finally:
        scheduler.stop(timeout=30)
    assert isinstance(results[1], DataError) and "holds the image token (id 7)" in str(results[1])
    for i in (0, 2, 3):
        assert torch.equal(results[i], generate(model, sources[i], None, **options)), i
