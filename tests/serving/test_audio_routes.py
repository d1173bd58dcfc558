"""OpenAI's /v1/audio routes against a real `encdec serve` of a tiny random Whisper (scripts/whisper_model.py's
directory, shrunk): 16 concurrent uploads of espeak-ng speech are each answered as `transcribe_batched` answers
for that recording alone, their pieces sharing the decoder (fewer decoder steps than tokens); every
response_format is read back by its parser (srt by `srt`, vtt by `webvtt-py`); bad uploads are a 4xx and one
sentence before any decoding; a client that hangs up gives back its places and rows; the text routes refuse a
speech model's text."""

import io
import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import srt
import torch
import webvtt
from server_kit import call, metric, serving

from encdec.audio import SAMPLE_RATE
from encdec.generation.generate import generate
from encdec.runs.open import open_model
from encdec.serving.scheduler import Abandoned, Scheduler
from encdec.transcription import FORMATS, render
from encdec.transcription.batched import pieces_of, transcribe_batched
from tests.transcription.speech_kit import SENTENCES, needs_espeak, tiny_whisper_dir, wav_bytes, with_pauses

pytest.importorskip("fastapi")
pytest.importorskip("transformers")
pytestmark = [needs_espeak, pytest.mark.usefixtures("one_thread")]

MAX_AUDIO_SECONDS, MAX_AUDIO_BYTES = 100, 4_000_000  # 100 s of 16 kHz 16-bit samples: 3.2 MB


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("whisper"))


@pytest.fixture(scope="module")
def server(model_dir):
    bounds = ("--max-audio-seconds", str(MAX_AUDIO_SECONDS), "--max-audio-bytes", str(MAX_AUDIO_BYTES))
    yield from serving(model_dir, *bounds)


@pytest.fixture(scope="module")
def recordings():
    """Four recordings of two or three sentences with pauses (5 to 7 s: two pieces of the 4 s window each)."""
    voices = ("en", "en-us", "en-gb", "en")
    return [with_pauses((SENTENCES * 2)[i : i + 2 + i % 2], voice=voices[i])[0] for i in range(4)]


def multipart(fields: dict, file: bytes | None, filename: str = "speech.wav") -> tuple[bytes, dict]:
    """A multipart/form-data body of `fields` and `file` (as OpenAI's client sends an upload), and its headers."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode(errors="surrogatepass")
        for k, v in fields.items()
    ]
    if file is not None:
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        parts.append(head.encode() + b"Content-Type: audio/wav\r\n\r\n" + file + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def upload(server, file: bytes | None, path: str = "/v1/audio/transcriptions", **fields):
    body, headers = multipart({"model": "whisper-tiny", **fields}, file)
    return call(server.url + path, body, headers)


def parsed(text, fmt: str):
    """The body read back as its format's parser reads it."""
    if fmt == "srt":
        return [(c.start.total_seconds(), c.end.total_seconds(), c.content) for c in srt.parse(text)]
    if fmt == "vtt":
        return [(c.start, c.end, c.text) for c in webvtt.from_buffer(io.StringIO(text)).captions]
    return text


def test_concurrent_uploads_are_answered_as_each_recording_alone_sharing_the_decoder(server, model_dir, recordings):
    opened = open_model(model_dir)
    expected = {}
    for fmt in FORMATS:
        timestamps = fmt in ("srt", "vtt", "verbose_json")
        for i, wave in enumerate(recordings):
            alone = transcribe_batched(
                opened.model, opened.text, [wave], opened.generation, return_timestamps=timestamps
            )
            expected[i, fmt] = render(alone[0], fmt)
    jobs = [(i % 4, FORMATS[i % len(FORMATS)]) for i in range(16)]
    steps, tokens = (
        metric(server.url, "encdec_decoder_steps_total"),
        metric(server.url, "encdec_generated_tokens_total"),
    )
    with ThreadPoolExecutor(16) as pool:
        answers = list(
            pool.map(lambda job: upload(server, wav_bytes(recordings[job[0]]), response_format=job[1]), jobs)
        )
    for (i, fmt), (status, body, headers) in zip(jobs, answers):
        assert status == 200, body
        text = json.dumps(body) if isinstance(body, dict) else body
        want = expected[i, fmt]
        assert (body == json.loads(want)) if isinstance(body, dict) else text == want, (fmt, body, want)
        assert (
            headers["content-type"].split(";")[0]
            == {
                "json": "application/json",
                "verbose_json": "application/json",
                "text": "text/plain",
                "srt": "application/x-subrip",
                "vtt": "text/vtt",
            }[fmt]
        )
        if fmt in ("srt", "vtt"):
            assert len(parsed(body, fmt)) >= 2  # a cue a segment, every recording two pieces at least
    steps = metric(server.url, "encdec_decoder_steps_total") - steps
    tokens = metric(server.url, "encdec_generated_tokens_total") - tokens
    assert 0 < steps < tokens, (steps, tokens)


def test_a_previous_text_is_served_and_an_english_only_model_refuses_to_translate(server, recordings):
    status, body, _ = upload(server, wav_bytes(recordings[0]), prompt="A dog runs.", response_format="verbose_json")
    assert status == 200 and body["task"] == "transcribe" and body["segments"], body
    status, body, _ = upload(server, wav_bytes(recordings[0]), "/v1/audio/translations")
    assert status == 422 and "English-only" in body["error"]["message"], body  # OpenAI's error object


def test_the_openapi_document_declares_the_upload_s_fields(server):
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        body = call(server.url + "/openapi.json")[1]["paths"][path]["post"]["requestBody"]
        fields = body["content"]["multipart/form-data"]["schema"]["properties"]
        names = {"file", "model", "language", "prompt", "response_format", "temperature"}
        assert set(fields) == names | {"timestamp_granularities", "timestamp_granularities[]"}  # OpenAI's, and bare
        assert fields["response_format"]["enum"] == list(FORMATS)
        assert (fields["temperature"]["minimum"], fields["temperature"]["maximum"]) == (0.0, 1.0)


HOSTILE = [
    "",
    "x" * 100_000,
    "\x00",
    "\ud800",
    "NaN",
    "inf",
    "-1",
    "0",
    "1",
    "2",
    "1e308",
    "[]",
    "segment",
    "word",
    "vtt",
]


def test_every_declared_field_of_the_upload_takes_every_hostile_value(server, recordings):
    """Each field the OpenAPI document declares, in turn given each hostile text in an otherwise good upload:
    a 2xx, or a 4xx with one JSON sentence; never a 5xx, a dropped connection or a traceback."""
    document = call(server.url + "/openapi.json")[1]["paths"]["/v1/audio/transcriptions"]["post"]
    names = [
        n for n in document["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"] if n != "file"
    ]
    wave, statuses = wav_bytes(recordings[0][:SAMPLE_RATE]), {}  # one piece
    for name in names:
        for value in HOSTILE:
            body, headers = multipart({name: value}, wave)
            status, answer, _ = call(server.url + "/v1/audio/transcriptions", body, headers)
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500, (name, value[:20], answer)
            if status >= 400:
                assert isinstance(answer, dict) and set(answer) == {"error"}, answer  # OpenAI's error object
                assert answer["error"]["type"] == "invalid_request_error" and "\n" not in answer["error"]["message"]
    assert statuses.get(200, 0) > 10 and metric(server.url, "encdec_queue_depth") == 0, statuses
    assert "Traceback" not in server.log()


def test_a_recording_of_more_pieces_than_an_upload_holds_places_is_answered_whole(server, model_dir):
    wave = with_pauses(SENTENCES * 8, pause_seconds=0.5)[0][: 90 * SAMPLE_RATE]  # about 20 pieces of 4 s
    opened = open_model(model_dir)
    alone = transcribe_batched(opened.model, opened.text, [wave], opened.generation, return_timestamps=True)[0]
    assert len(alone.segments) > 16
    status, body, _ = upload(server, wav_bytes(wave), response_format="srt")
    assert status == 200 and body == render(alone, "srt"), body
    assert metric(server.url, "encdec_queue_depth") == 0


BAD = {
    "not multipart": (None, {}, 400, "multipart/form-data"),
    "no file": (None, {"response_format": "json"}, 400, "no file"),
    "not audio": (b"hello, I am text" * 100, {}, 400, "uploaded file"),
    "an empty file": (b"", {}, 400, "empty"),
    "an unknown format": ("wave", {"response_format": "xml"}, 422, "response_format"),
    "a temperature out of range": ("wave", {"temperature": "3"}, 422, "temperature"),
    "temperature not a number": ("wave", {"temperature": "warm"}, 422, "temperature"),
    "word timestamps outside verbose_json": ("wave", {"timestamp_granularities[]": "word"}, 422, "verbose_json"),
    "an unknown granularity": ("wave", {"timestamp_granularities[]": "letter"}, 422, "timestamp_granularities"),
    "an unknown field": ("wave", {"speed": "2"}, 422, "unknown field"),
    "a language for an English-only model": ("wave", {"language": "fr"}, 422, "English-only"),
    "too long": ("long", {}, 400, f"{MAX_AUDIO_SECONDS}"),
    "ten hours in under a megabyte": ("ten hours", {}, 400, "lasts 10.0 h"),
    "too many bytes": ("large", {}, 413, "bytes"),
}


def ten_hours_of_flac() -> bytes:
    """Ten hours of silence at 8 kHz as FLAC: 0.9 MB, within the byte bound; its header gives it away."""
    import soundfile

    out, block = io.BytesIO(), np.zeros(1 << 20, dtype=np.int16)
    with soundfile.SoundFile(out, "w", 8000, 1, format="FLAC", subtype="PCM_16") as flac:
        for _ in range(10 * 3600 * 8000 // len(block)):
            flac.write(block)
    return out.getvalue()


@pytest.mark.parametrize("file, fields, status, words", BAD.values(), ids=BAD)
def test_a_bad_upload_is_a_4xx_and_one_sentence(server, recordings, file, fields, status, words):
    files = {
        "wave": lambda: wav_bytes(recordings[0]),
        "long": lambda: wav_bytes(torch.zeros((MAX_AUDIO_SECONDS + 5) * SAMPLE_RATE)),
        "ten hours": ten_hours_of_flac,
        "large": lambda: b"\0" * (MAX_AUDIO_BYTES + 100 * 1024),
    }
    if fields == {} and file is None:  # not multipart at all: a JSON body
        got = call(server.url + "/v1/audio/transcriptions", {"file": "speech.wav"})
    else:
        got = upload(server, files[file]() if isinstance(file, str) else file, **fields)
    assert got[0] == status, got
    assert set(got[1]["error"]) == {"message", "type", "param", "code"}, got  # OpenAI's error object
    sentence = got[1]["error"]["message"]
    assert words in sentence and "\n" not in sentence and "Traceback" not in sentence, sentence


def test_the_text_routes_refuse_a_speech_model_s_text(server):
    status, body, _ = call(server.url + "/generate", {"inputs": "/etc/passwd"})
    assert status == 422 and "/v1/audio/transcriptions" in body["error"], body


@pytest.mark.parametrize(
    "fields",
    [{"response_format": "json"}, {"response_format": "verbose_json", "timestamp_granularities[]": "word"}],
    ids=["segments", "words"],
)
def test_a_client_that_hangs_up_gives_back_its_places_and_rows(server, recordings, fields):
    assert upload(server, wav_bytes(recordings[2]), **fields)[0] == 200  # answered whole (and counted) first
    body, headers = multipart(fields, wav_bytes(recordings[2]))
    head = f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: test\r\nContent-Type: {headers['Content-Type']}\r\n"
    answered = metric(server.url, "encdec_requests_total")
    for _ in range(3):  # gone as soon as the upload is sent: while it is read, cut, decoded, or its words timed
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as connection:
            connection.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    until(lambda: metric(server.url, "encdec_requests_total") == answered + 3, "ended the three requests")
    until(lambda: metric(server.url, "encdec_queue_depth") == 0, "gave back the places of the requests gone")
    until(lambda: metric(server.url, "encdec_running_slots") == 0, "freed the rows of the requests gone")
    assert upload(server, wav_bytes(recordings[2]))[0] == 200  # the server answers on


POLLS = 2400  # looks at the server, 50 ms apart: only a server that never answers uses them all


def until(condition, what: str) -> None:
    for _ in range(POLLS):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"the server never {what}")


def test_a_whisper_request_gone_mid_decoding_stops_at_a_step_and_gives_back_its_rows(model_dir, recordings):
    opened = open_model(model_dir)
    step = opened.model.step

    def slow_step(*args, **kwargs):  # 20 ms a step: the decoding is still running when its client goes
        time.sleep(0.02)
        return step(*args, **kwargs)

    opened.model.step = slow_step
    features = pieces_of([recordings[0]], opened.text).features(0, 1)
    options = {"defaults": opened.generation}
    scheduler, gone, outcome = Scheduler(opened.model), threading.Event(), []
    try:
        worker = threading.Thread(target=lambda: outcome.append(caught(scheduler.run, features, None, options, gone)))
        worker.start()
        until(lambda: scheduler.running_rows > 0 and scheduler.steps > 3, "started the decoding")
        gone.set()
        scheduler.wake()
        worker.join(30)
        assert isinstance(outcome[0], Abandoned), outcome
        until(lambda: scheduler.running_rows == 0, "gave back the rows")
        steps = scheduler.steps
        alone = generate(opened.model, features, defaults=opened.generation)
        assert torch.equal(scheduler.run(features, None, options), alone)
        until(lambda: scheduler.running_rows == 0, "gave back the rows of a whole decoding")
        assert scheduler.steps > steps
    finally:
        scheduler.stop(timeout=30)


def caught(function, *args):
    """function(*args), or the exception it raised."""
    try:
        return function(*args)
    except Exception as error:
        return error


def test_openai_s_own_client_transcribes_and_translates_as_transcribe_batched(server, model_dir, recordings):
    """The `openai` package's client, pointed at the server, gets what transcribe_batched gives the recording
    alone: its verbose_json as the client's Transcription object (with timestamp_granularities word, its words
    those of transcribe_batched(word_timestamps=True)), its srt as the text the client returns."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    opened = open_model(model_dir)
    [alone] = transcribe_batched(opened.model, opened.text, [recordings[1]], opened.generation, return_timestamps=True)
    file = ("speech.wav", wav_bytes(recordings[1]), "audio/wav")
    got = client.audio.transcriptions.create(model="whisper-tiny", file=file, response_format="verbose_json")
    expected = json.loads(render(alone, "verbose_json"))
    assert got.text == expected["text"] and got.duration == pytest.approx(expected["duration"])
    assert [(s.start, s.end, s.text) for s in got.segments] == [
        (s["start"], s["end"], s["text"]) for s in expected["segments"]
    ]
    [worded] = transcribe_batched(
        opened.model, opened.text, [recordings[1]], opened.generation, return_timestamps=True, word_timestamps=True
    )
    for granularities in (["word"], ["segment", "word"]):  # OpenAI's timestamp_granularities[], given twice
        got = client.audio.transcriptions.create(
            model="whisper-tiny", file=file, response_format="verbose_json", timestamp_granularities=granularities
        )
        expected = json.loads(render(worded, "verbose_json"))
        assert expected["words"] and [(w.word, w.start, w.end) for w in got.words] == [
            (w["word"], w["start"], w["end"]) for w in expected["words"]
        ]
        assert [(s.start, s.end, s.text) for s in got.segments] == [
            (s["start"], s["end"], s["text"]) for s in expected["segments"]
        ]
    subtitles = client.audio.transcriptions.create(model="whisper-tiny", file=file, response_format="srt")
    assert list(srt.parse(subtitles)) == list(srt.parse(render(alone, "srt")))
    with pytest.raises(openai.UnprocessableEntityError) as refused:  # the refusal, a 4xx the client raises
        client.audio.translations.create(model="whisper-tiny", file=file)
    assert "English-only" in refused.value.response.json()["error"]["message"]
