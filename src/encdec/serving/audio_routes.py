"""POST /v1/audio/transcriptions and /v1/audio/translations: OpenAI's audio API over the continuous batching.

    curl localhost:8000/v1/audio/transcriptions -F file=@talk.flac -F response_format=srt

A multipart upload (python-multipart, through Starlette's parser) of OpenAI's fields: file (wav, flac, ogg or
mp3, read as encdec.audio reads a file), model (a name; this server serves one model), language, prompt
(the previous text), response_format (json, text, srt, verbose_json, vtt), temperature (0: greedy; above:
sampled at it), timestamp_granularities[] (segment, word; given twice, both: words with verbose_json). The recording
is cut at its pauses into pieces of at most the
model's window (encdec.transcription.batched) and each piece decoded as a row of the scheduler's running
batch beside every other request's (serving.scheduler: Whisper's rules, its prompt stepped one position a
step), so many uploads share the decoder; the pieces' tokens are put together into a Transcript and
rendered in the asked format with its media type (encdec.transcription.render). Words are timed after the
decoding, a teacher-forced pass over 16 pieces at a time run between two of the scheduler's steps
(Scheduler.exclusive: the pass records attention in the model's modules). An upload's transcript equals
`transcribe_batched` on that recording alone, its words included.

Bounds, checked before any decoding: the body's bytes (--max-audio-bytes, 413, before it is parsed), the
recording's length (--max-audio-seconds, from the file's header before its samples are decoded); an upload
holds at most 16 places of --max-queue, its pieces decoded 16 at a time. A file that is not audio, a field
out of its range, a text model: a 4xx and one sentence.
A client that hangs up stops its pieces at the next step and gives back their rows, as /generate's do.
"""

from __future__ import annotations

import threading
import types
import typing
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Annotated, Literal

import anyio
from fastapi import FastAPI, Request, Response
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from encdec.audio import read_audio_bytes
from encdec.audio.recordings import READ_NAMES
from encdec.errors import EncdecError
from encdec.generation.generate import resolve_config
from encdec.generation.interface import capabilities_of
from encdec.schema import Range, Satisfies, field_type, short, value_of
from encdec.serving.request_rows import Abandoned
from encdec.serving.requests import RequestError
from encdec.serving.validate import read_body
from encdec.tokenizers.languages import hf_tokenizer_of
from encdec.transcription import render
from encdec.transcription.batched import Pieces, piece_times, pieces_of, transcripts_of, trimmed
from encdec.transcription.response_formats import FORMATS, MEDIA_TYPES

FIELD_BYTES = 64 << 10  # the form's fields beside the file: their bytes each, and the body's beyond the file
PIECES_AT_ONCE = 16  # an upload's pieces in the running batch at a time: the places in flight (--max-queue) it holds
MAX_PROMPT_CHARS = 2000  # a previous text (Whisper reads at most 224 of its tokens)


def short_text(most: int):
    return Satisfies(lambda text: 0 < len(text) <= most, f"a text of 1 to {most:,} characters")


@dataclass(frozen=True)
class AudioRequest:
    """The form's fields besides the file, as OpenAI names them, each with its rule (encdec.schema)."""

    model: Annotated[str, short_text(200)] | None = None  # this server's one model answers, whatever the name
    language: Annotated[str, short_text(20)] | None = None
    prompt: Annotated[str, short_text(MAX_PROMPT_CHARS)] | None = None
    response_format: Literal[FORMATS] = "json"  # the formats render writes
    temperature: Annotated[float, Range(0.0, 1.0)] = 0.0
    timestamp_granularities: Literal["segment", "word"] = "segment"  # a value; "word" given (alone or too): words


FORM_FIELDS = {f.name: f.name for f in fields(AudioRequest)} | {"timestamp_granularities[]": "timestamp_granularities"}
HINTS = typing.get_type_hints(AudioRequest, include_extras=True)
NUMBERS = {"temperature"}  # read as a number (schema.number); the others are the texts they are


def upload_schema() -> dict:
    """The upload as /openapi.json declares it: its file, and AudioRequest's fields with the values they allow
    (made from the declaration read_form checks against, so a field added there is documented here)."""
    properties = {"file": {"type": "string", "format": "binary", "description": f"the recording: {READ_NAMES}"}}
    for name, key in FORM_FIELDS.items():
        properties[name] = field_schema(HINTS[key])
    schema = {"type": "object", "properties": properties, "required": ["file"], "additionalProperties": False}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


def field_schema(annotation) -> dict:
    """A form field's JSON schema: its allowed values (Literal), its range (Range), else a string."""
    while typing.get_origin(annotation) in (typing.Union, types.UnionType, Annotated):
        rules = typing.get_args(annotation)
        if typing.get_origin(annotation) is Annotated:
            ranges = [rule for rule in rules[1:] if isinstance(rule, Range)]
            if ranges and rules[0] is float:
                return {"type": "number", "minimum": ranges[0].lo, "maximum": ranges[0].hi}
        annotation = rules[0]
    if typing.get_origin(annotation) is Literal:
        return {"type": "string", "enum": list(typing.get_args(annotation))}
    return {"type": "string"}


async def read_form(request: Request, server) -> tuple[bytes, AudioRequest]:
    """The upload's file and fields, each checked; a RequestError (one sentence) for the first thing wrong."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise RequestError(400, "an audio request is a multipart/form-data upload with the recording as its file")
    bounded = replace(server.limits, max_body_bytes=server.limits.max_audio_bytes + FIELD_BYTES)
    body = await read_body(request, bounded)

    async def whole():
        yield body

    try:
        form = await MultiPartParser(
            request.headers, whole(), max_files=1, max_fields=len(FORM_FIELDS), max_part_size=FIELD_BYTES
        ).parse()
    except MultiPartException as error:
        raise RequestError(400, f"the upload is not a valid multipart form: {str(error).rstrip('.').lower()}")
    upload, values = None, {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            upload = value if name == "file" else None
            if upload is None:
                raise RequestError(400, f"the upload's file is its field file, not {short(name)}")
            continue
        if name not in FORM_FIELDS:
            raise RequestError(422, f"unknown field {short(name)}; the fields are {', '.join(FORM_FIELDS)}")
        key = FORM_FIELDS[name]
        try:
            given = field_type(AudioRequest, key, name)(value) if key in NUMBERS else value_of(HINTS[key], value, name)
        except EncdecError as error:
            raise RequestError(422, str(error)) from None
        twice = key == "timestamp_granularities" and values.get(key) == "word"  # segment and word: words too
        values[key] = "word" if twice else given
    if upload is None:
        raise RequestError(400, "the upload holds no file: send the recording as the form's field file")
    data = await upload.read()
    if not data:
        raise RequestError(400, "the uploaded file is empty")
    asked = AudioRequest(**values)
    if asked.timestamp_granularities == "word" and asked.response_format != "verbose_json":
        raise RequestError(422, "word timestamps are written in verbose_json: set response_format to verbose_json")
    return data, asked


def whisper_options(asked: AudioRequest, task: str, speech, defaults: dict) -> dict:
    """The generate options of an audio request: the model's defaults under Whisper's language, task, previous
    text and timestamps (the subtitle and verbose formats carry times), the temperature sampled at."""
    options = {"defaults": defaults, "return_timestamps": asked.response_format in ("srt", "vtt", "verbose_json")}
    if task == "translate":
        options["task"] = task
    if asked.language is not None:
        options["language"] = asked.language
    if asked.prompt is not None:  # transformers' get_prompt_ids: <|startofprev|> and the text after a space
        tokenizer = hf_tokenizer_of(speech.text)
        prev = tokenizer.convert_tokens_to_ids("<|startofprev|>") if tokenizer is not None else None
        if prev is None or prev == tokenizer.unk_token_id:
            raise RequestError(422, "this model's tokenizer has no <|startofprev|>: a prompt is not served for it")
        options["prompt_ids"] = [prev, *tokenizer.encode(" " + asked.prompt.strip(), add_special_tokens=False)]
    if asked.temperature > 0:
        options |= {"do_sample": True, "temperature": asked.temperature}
    return options


def add_audio_routes(app: FastAPI, server) -> None:
    """The two routes on `app`, sharing `server` (serving.app's Server): its scheduler, bounds and metrics."""

    async def answer(request: Request, task: str) -> Response:
        path = request.url.path
        if not capabilities_of(server.opened.model).reads_features:
            raise RequestError(422, "this server's model reads text, not recordings: POST its inputs to /generate")
        cfg = resolve_config(server.opened.model, {}, server.defaults)  # the pad id and the first timestamp's
        if cfg.whisper is None:
            raise RequestError(
                422, "this model has no Whisper decoding rules (generation_config.json) to transcribe by"
            )
        data, asked = await read_form(request, server)
        wave = await anyio.to_thread.run_sync(read_upload, data, server.limits.max_audio_seconds)
        pieces = await anyio.to_thread.run_sync(pieces_of, [wave], server.text)
        options = whisper_options(asked, task, server.text, server.defaults)
        jobs = [partial(decode_piece, server, pieces, i, options, cfg.pad_token_id) for i in range(len(pieces.spans))]
        tokens = await server.in_threads(request, jobs, PIECES_AT_ONCE)  # rows of the running batch, a thread each
        timed = None
        if asked.timestamp_granularities == "word":  # PIECES_AT_ONCE pieces a pass, each between two steps
            batches = range(0, len(tokens), PIECES_AT_ONCE)
            jobs = [
                partial(time_pieces, server, pieces, at, tokens[at : at + PIECES_AT_ONCE], options) for at in batches
            ]
            timed = [one for batch in await server.in_threads(request, jobs, 1) for one in batch]
        first, timestamps = cfg.whisper.timestamp_begin, options["return_timestamps"]
        transcript = transcripts_of(pieces, tokens, server.text, first, timestamps, task, asked.language, timed)[0]
        server.metrics.requests.labels(path, "200").inc()
        return Response(render(transcript, asked.response_format), media_type=MEDIA_TYPES[asked.response_format])

    @app.post("/v1/audio/transcriptions", openapi_extra=upload_schema())
    async def transcriptions(request: Request):
        return await answer(request, "transcribe")

    @app.post("/v1/audio/translations", openapi_extra=upload_schema())
    async def translations(request: Request):
        return await answer(request, "translate")


def read_upload(data: bytes, max_seconds: float):
    """The uploaded file's wave, or a 400 in one sentence (not audio, too long, empty ...)."""
    try:
        return read_audio_bytes(data, max_seconds, name="the uploaded file")
    except EncdecError as error:
        raise RequestError(400, str(error)) from None


def time_pieces(server, pieces: Pieces, start: int, tokens: list[list[int]], options: dict, gone: threading.Event):
    """Pieces start.. decoded into `tokens`, timed for their words (batched.piece_times) in the scheduler's thread
    between two steps; Abandoned where the client has gone before it runs."""
    if gone.is_set():
        raise Abandoned("the client is gone")
    return server.scheduler.exclusive(partial(piece_times, server.opened.model, pieces, start, tokens, **options))


def decode_piece(server, pieces: Pieces, index: int, options: dict, pad: int, gone: threading.Event) -> list[int]:
    """One piece decoded in the running batch: its tokens under Whisper's rules, the padding (`pad`) cut off."""
    out = server.scheduler.run(pieces.features(index, index + 1), None, options, gone)
    tokens = trimmed(out[0].tolist(), pad)
    server.metrics.count_tokens(len(tokens))
    return tokens
