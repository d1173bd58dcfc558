"""The clients users already have, unchanged, against a real `encdec serve`: huggingface_hub's
InferenceClient.text_generation (TGI's `POST /`: plain, details, stream, stream with details, seeded sampling)
and OpenAI's own Python client (/v1/completions: greedy, logprobs, echo, stop, n samples with a seed, a list of
prompts, streaming; /v1/models; refusals in OpenAI's error shape). Each output equals `generate` on that input
alone with the options the request makes; each token's log-probability equals the model's log-softmax."""

import json
import threading
import time

import pytest
import torch
from server_kit import call, free_port, serving, tiny_model_dir
from test_server import generate_alone

from encdec.generation.text_generator import TextGenerator
from encdec.runs.open import open_model

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
huggingface_hub = pytest.importorskip("huggingface_hub")
openai = pytest.importorskip("openai")

TEXT, OTHER = "A man rides a bike.", "Two dogs play in the snow."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("clients") / "t5")


@pytest.fixture(scope="module")
def server(model_dir):
    yield from serving(model_dir, "--max-new-tokens", "40", absent=("Traceback", "ERROR"))


@pytest.fixture(scope="module")
def opened(model_dir):
    return open_model(str(model_dir))


@pytest.fixture(scope="module")
def tgi(server):
    return huggingface_hub.InferenceClient(server.url)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def alone(opened, text: str, **options) -> list[list[int]]:
    """The tokens `generate` gives `text` alone under `options` (the model's defaults beneath), each output's
    up to its first EOS."""
    generator = TextGenerator(opened.text, opened.generation)
    ids = generator.generate(opened.model, generator.encode([text]), **options)
    eos = opened.model.config.eos_id
    return [row[: row.index(eos) + 1] if eos in row else row for row in ids[:, 1:].tolist()]


def text_of(opened, ids: list[int]) -> str:
    """The text of `ids` as it is streamed and completed (special tokens dropped, not stripped)."""
    return opened.text.decode(ids, skip_special_tokens=True)


def model_logprobs(opened, text: str, ids: list[int]) -> list[float]:
    """The model's log-softmax of each of `ids`, teacher-forced after its decoder-start token."""
    encoded = TextGenerator(opened.text).encode([text])
    start = opened.model.config.decoder_start_id
    with torch.no_grad():
        logits = opened.model(encoded["input_ids"], torch.tensor([[start, *ids[:-1]]]), encoded["attention_mask"])
    return logits.logits[0].float().log_softmax(-1).gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


def test_inference_client_text_generation_equals_generate(tgi, server, model_dir, opened, tmp_path):
    options = {"max_new_tokens": 12}
    assert tgi.text_generation(TEXT, **options) == generate_alone(model_dir, TEXT, options, tmp_path)
    detailed = tgi.text_generation(TEXT, details=True, decoder_input_details=True, **options)
    ids = alone(opened, TEXT, **options)[0]
    assert detailed.generated_text == generate_alone(model_dir, TEXT, options, tmp_path)
    assert [t.id for t in detailed.details.tokens] == ids and detailed.details.generated_tokens == len(ids)
    assert "".join(t.text for t in detailed.details.tokens) == text_of(opened, ids)
    expected = model_logprobs(opened, TEXT, ids)
    assert [t.logprob for t in detailed.details.tokens] == pytest.approx(expected, abs=1e-4)
    assert detailed.details.finish_reason in ("length", "eos_token")
    assert [p.id for p in detailed.details.prefill] == [opened.model.config.decoder_start_id]
    assert "".join(tgi.text_generation(TEXT, stream=True, **options)) == text_of(opened, ids)
    events = list(tgi.text_generation(TEXT, stream=True, details=True, **options))
    assert [e.token.id for e in events] == ids and events[-1].generated_text == detailed.generated_text
    assert [e.token.logprob for e in events] == pytest.approx(expected, abs=1e-4)
    assert events[-1].details.generated_tokens == len(ids) and events[-1].details.input_length > 0


def test_inference_client_seeded_sampling_equals_generate(tgi, model_dir, opened, tmp_path):
    options = {"max_new_tokens": 16, "do_sample": True, "seed": 7, "top_k": 20}
    text = tgi.text_generation(OTHER, **options)
    assert text == generate_alone(model_dir, OTHER, options, tmp_path) and text
    streamed = list(tgi.text_generation(OTHER, stream=True, details=True, **options))
    assert [e.token.id for e in streamed] == alone(opened, OTHER, **options)[0]
    stop = next(c for c in text[2:] if c.isascii() and c.isalnum())  # a whole character of the sample's
    # TGI's stop: generation ends once the text holds it (kept in the text, as TGI keeps it)
    stopped = tgi.text_generation(OTHER, stop=[stop], **options)
    assert stopped == TextGenerator(opened.text)(opened.model, [OTHER], stop_strings=[stop], **options)[0]
    assert stop in stopped and len(stopped) < len(text)
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError, match="best_of must be 1"):  # the client's error
        tgi.text_generation(OTHER, best_of=2, **options)


def test_tgi_root_answers_a_list_and_refuses_what_tgi_refuses(server):
    status, answer, _ = call(server.url + "/", {"inputs": TEXT, "parameters": {"max_new_tokens": 4}})
    assert status == 200 and isinstance(answer, list) and set(answer[0]) == {"generated_text"}
    refusals = [
        {"inputs": TEXT, "parameters": {"best_of": 2, "do_sample": True}},
        {"inputs": TEXT, "parameters": {"watermark": True}},
        {"inputs": TEXT, "parameters": {"top_n_tokens": 3}},
        {"inputs": TEXT, "parameters": {"num_beams": 2}, "stream": True},
        {"inputs": TEXT, "stream": "yes"},
        {"inputs": TEXT, "extra": 1},
    ]
    for body in refusals:
        status, answer, _ = call(server.url + "/", body)
        assert status == 422 and set(answer) == {"error"} and "\n" not in answer["error"], (body, answer)
    taken = {"best_of": 1, "watermark": False, "return_full_text": False, "details": False, "max_new_tokens": 3}
    assert call(server.url + "/", {"inputs": TEXT, "parameters": taken, "stream": False})[0] == 200


def test_openai_greedy_completion_with_logprobs_equals_generate(client, opened):
    ids = alone(opened, TEXT, max_new_tokens=10)[0]
    got = client.completions.create(model="t5", prompt=TEXT, max_tokens=10, temperature=0, logprobs=2)
    choice = got.choices[0]
    assert choice.text == text_of(opened, ids) and got.usage.completion_tokens == len(ids)
    assert "".join(choice.logprobs.tokens) == choice.text
    assert choice.logprobs.token_logprobs == pytest.approx(model_logprobs(opened, TEXT, ids), abs=1e-4)
    for chosen, top in zip(choice.logprobs.token_logprobs, choice.logprobs.top_logprobs):
        assert len(top) <= 2 and max(top.values()) == pytest.approx(chosen, abs=1e-6)  # greedy: the likeliest
    offsets = [sum(len(t) for t in choice.logprobs.tokens[:i]) for i in range(len(ids))]
    assert choice.logprobs.text_offset == offsets
    echoed = client.completions.create(model="t5", prompt=TEXT, max_tokens=10, temperature=0, echo=True)
    assert echoed.choices[0].text == TEXT + choice.text


def test_openai_n_seeded_samples_and_prompt_lists_equal_generate(client, opened):
    got = client.completions.create(model="t5", prompt=[TEXT, OTHER], max_tokens=12, n=2, seed=5, top_p=0.9)
    assert [c.index for c in got.choices] == [0, 1, 2, 3]
    for i, text in enumerate([TEXT, OTHER]):
        options = {"max_new_tokens": 12, "do_sample": True, "num_return_sequences": 2, "seed": 5, "top_k": 0}
        samples = alone(opened, text, top_p=0.9, temperature=1.0, **options)
        assert [c.text for c in got.choices[2 * i : 2 * i + 2]] == [text_of(opened, s) for s in samples]
    greedy = client.completions.create(model="t5", prompt=TEXT, max_tokens=6, temperature=0, n=3)
    assert len({c.text for c in greedy.choices}) == 1 and len(greedy.choices) == 3


def test_openai_stop_cuts_before_the_stop_string(client, opened):
    options = {"max_new_tokens": 20, "do_sample": True, "seed": 3, "top_k": 0, "temperature": 1.0}
    whole = text_of(opened, alone(opened, OTHER, **options)[0])
    stop = next(c for c in whole[2:] if c.isascii() and c.isalnum())  # a whole character of the sample
    assert stop, whole
    got = client.completions.create(model="t5", prompt=OTHER, max_tokens=20, seed=3, stop=[stop])
    assert got.choices[0].text == whole[: whole.index(stop)] and got.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="t5", prompt=OTHER, max_tokens=20, seed=3, stop=stop, stream=True)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == got.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_openai_stream_equals_the_completion(client):
    asked = {"model": "t5", "prompt": OTHER, "max_tokens": 12, "temperature": 0, "logprobs": 1}
    whole = client.completions.create(**asked).choices[0]
    chunks = list(client.completions.create(stream=True, **asked))
    assert "".join(c.choices[0].text for c in chunks) == whole.text
    streamed = [lp for c in chunks if c.choices[0].logprobs for lp in c.choices[0].logprobs.token_logprobs]
    assert streamed == pytest.approx(whole.logprobs.token_logprobs, abs=1e-6)
    assert chunks[-1].choices[0].finish_reason == whole.finish_reason


def test_openai_models_and_refusals_in_openai_error_shape(client, server):
    assert [m.id for m in client.models.list().data] == ["t5"] and client.models.retrieve("t5").id == "t5"
    refused = [
        ({"best_of": 2}, "best_of"),
        ({"max_tokens": 41}, "max_tokens"),
        ({"n": 9}, "n"),
        ({"logprobs": 6}, "logprobs"),
        ({"echo": True, "logprobs": 1}, "echo"),
        ({"n": 2, "stream": True}, "stream"),
        ({"extra_body": {"unknown": 1}}, "unknown"),
    ]
    for asked, param in refused:
        with pytest.raises(openai.UnprocessableEntityError) as error:
            client.completions.create(model="t5", prompt=TEXT, **asked)
        body = error.value.body
        assert body["type"] == "invalid_request_error" and body["param"] == param, body
        assert "\n" not in body["message"]
    for path, body, status in [("/v1/completions", b"{", 400), ("/v1/completions", {"model": "t5"}, 422)]:
        got, answer, _ = call(server.url + path, body)
        assert got == status and set(answer) == {"error"}, answer
        assert set(answer["error"]) == {"message", "type", "param", "code"}, answer
    with pytest.raises(openai.UnprocessableEntityError, match="chat completions are not served"):
        client.chat.completions.create(model="t5", messages=[{"role": "user", "content": TEXT}])
    assert call(server.url + "/v1/models/other")[0] == 404
    assert call(server.url + "/v1/nothing")[1]["error"]["code"] == "not_found"
    assert call(server.url + "/nothing")[1] == {"error": "no such path '/nothing'"}  # TGI's shape off /v1


def test_n_samples_of_one_request_share_one_encoder_pass(opened):
    """Counted in a server run in this process: a forward hook on the encoder sees one pass for n=3."""
    import uvicorn

    from encdec.serving.app import build_app

    passes = []
    hook = opened.model.encoder.register_forward_hook(lambda *_: passes.append(1))
    port = free_port()
    served = uvicorn.Server(uvicorn.Config(build_app(opened), port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    try:
        for _ in range(2400):  # at most 2,400 polls (two minutes at least): a server that never starts fails
            if served.started:
                break
            time.sleep(0.05)
        assert served.started, "the server did not start"
        url = f"http://127.0.0.1:{port}/v1"
        got = openai.OpenAI(base_url=url, api_key="-", max_retries=0).completions.create(
            model="t5", prompt=TEXT, max_tokens=8, n=3, seed=1
        )
        assert len(got.choices) == 3 and len(passes) == 1
    finally:
        served.should_exit = True
        thread.join(30)
        hook.remove()


def test_openapi_declares_the_new_bodies(server):
    paths = call(server.url + "/openapi.json")[1]["paths"]
    completion = paths["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"prompt", "max_tokens", "n", "logprobs", "stop"} <= set(completion["properties"])
    root = paths["/"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "stream" in root["properties"] and "best_of" in root["properties"]["parameters"]["properties"]
    assert json.dumps(root)  # plain JSON
