"""POST /score: each pair's log-probability of its given target, as `encdec score` gives it, beside running decoding.

    POST /score  {"inputs": [{"source": "Ein Hund.", "target": "A dog."}, ...],
                  "parameters": {"normalise": "mean" | "sum" | "gnmt", "alpha": 0.6}}
              -> [{"tokens": ["▁A", "▁dog", ".", "</s>"], "token_ids": [...], "token_logprobs": [...],
                   "total": -7.31, "score": -1.83, "cut": false}, ...]

The pairs are encoded as `encdec score` and `encdec evaluate` encode them (evaluation.pair_scores: the target
as training tokenised it, EOS last) in the request's thread; each batch's teacher-forced forward runs in the
scheduler's thread between two decoding steps (Scheduler.exclusive), so scoring shares the model with the
requests being decoded, each of which waits one forward a batch. The request is bounded by the
server's Limits (--max-inputs pairs, --max-input-chars characters a text, the body's bytes) and its parameters
are ScoreOptions, the declaration `encdec score`'s flags read too; a bad one is a 4xx and one sentence.
"""

from __future__ import annotations

import threading
import typing
from dataclasses import fields
from typing import Any

import anyio
from fastapi import FastAPI, Request

from encdec.errors import ConfigError
from encdec.evaluation.encoding import opened_encoding
from encdec.evaluation.pair_scores import ScoreOptions, pair_scores
from encdec.generation.interface import capabilities_of
from encdec.inspection.maps import token_strings
from encdec.schema import read, short
from encdec.serving.audio_routes import field_schema
from encdec.serving.requests import Limits, RequestError, check_inputs, json_body
from encdec.serving.scheduler import Abandoned
from encdec.serving.validate import read_body

FIELDS = {"inputs": "a non-empty list of {source, target} pairs", "parameters": "how each score is normalised"}
PAIR = ("source", "target")


def score_schema() -> dict[str, Any]:
    """The request body as /openapi.json declares it, made from ScoreOptions' fields (their values and ranges)."""
    hints = typing.get_type_hints(ScoreOptions, include_extras=True)
    parameters = {f.name: field_schema(hints[f.name]) for f in fields(ScoreOptions)}
    pair = {
        "type": "object",
        "properties": {name: {"type": "string"} for name in PAIR},
        "required": list(PAIR),
        "additionalProperties": False,
    }
    properties = {
        "inputs": {"type": "array", "items": pair, "minItems": 1},
        "parameters": {"type": "object", "properties": parameters, "additionalProperties": False},
    }
    for name, text in FIELDS.items():
        properties[name]["description"] = text
    body = {"type": "object", "properties": properties, "required": ["inputs"], "additionalProperties": False}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": body}}}}


def parse_score(body: bytes, limits: Limits) -> tuple[list[tuple[str, str]], ScoreOptions]:
    """The pairs and options a body holds, or a RequestError (or ConfigError, a 422) saying what is wrong."""
    value = json_body(body, limits)
    unknown = [key for key in value if key not in FIELDS]
    if unknown:
        raise RequestError(422, f"unknown field {short(unknown[0])}; a score request has inputs and parameters")
    inputs = value.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise RequestError(422, f"inputs must be a non-empty list of {{source, target}} pairs, got {short(inputs)}")
    for i, pair in enumerate(inputs):
        if not isinstance(pair, dict) or set(pair) != set(PAIR):
            raise RequestError(422, f"input {i} must be an object of a source and a target, got {short(pair)}")
    sources, _ = check_inputs([pair["source"] for pair in inputs], limits)
    for i, pair in enumerate(inputs):
        if isinstance(pair["target"], str) and not pair["target"].strip():
            raise RequestError(422, f"input {i}'s target is empty: there is nothing to score")
    targets, _ = check_inputs([pair["target"] for pair in inputs], limits)
    parameters = value.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise RequestError(422, f"parameters must be a JSON object, got {short(parameters)}")
    try:
        options = read(ScoreOptions, parameters, "parameters.")
    except ConfigError as error:
        raise RequestError(422, str(error)) from None
    return list(zip(sources, targets)), options


def add_score_route(app: FastAPI, server) -> None:
    """POST /score on `server` (serving.app.Server): its model, its scheduler and its bounds."""
    encodings = []  # the model's text encoding, made at the first request

    def score(pairs: list[tuple[str, str]], options: ScoreOptions, gone: threading.Event) -> list[dict]:
        def between_steps(forward):
            if gone.is_set():
                raise Abandoned("the client is gone")
            return server.scheduler.exclusive(forward)

        encodings[:] = encodings or [opened_encoding(server.opened)]
        model, most = server.opened.model, server.limits.max_inputs
        scores = pair_scores(model, encodings[0], pairs, options, most, run=between_steps)
        return [score.record(token_strings(server.opened, score.token_ids)) for score in scores]

    @app.post("/score", openapi_extra=score_schema())
    async def score_route(request: Request):
        if capabilities_of(server.opened.model).reads_features:
            raise RequestError(422, "this server's model reads recordings, not text: it scores no text pairs")
        body = await read_body(request, server.limits)
        pairs, options = await anyio.to_thread.run_sync(parse_score, body, server.limits)
        (answer,) = await server.in_threads(request, [lambda gone: score(pairs, options, gone)])
        server.metrics.requests.labels("/score", "200").inc()
        return answer
