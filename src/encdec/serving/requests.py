"""What a request to the server may say, declared once and checked before any work: TGI's request shape,
Hugging Face's generation option names, every size bounded by the server's settings.

    POST /generate         {"inputs": "text" | ["text", ...], "parameters": {"max_new_tokens": 32, ...}}
    POST /generate_stream  {"inputs": "text", "parameters": {...}}          (greedy or sampling, one output)

A refusal is a RequestError: its HTTP status (400 malformed, 413 too large, 422 invalid) and one sentence.
Nothing in a request names a file, a device or a model: only texts and generation options.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from encdec.errors import ConfigError, suggestion
from encdec.generation.config import HTTP_OPTIONS, GenerationConfig
from encdec.schema import short

# The generation options a request may set, as Hugging Face names them: those GenerationConfig exposes to HTTP;
# the rest (a streamer, compile, a generator, output_scores, ...) are the server's to decide.
OPTIONS = HTTP_OPTIONS
EXTRAS = {  # parameters of the server's own, true or false
    "details": "TGI's details: finish reason, token count, seed, beam alternatives with scores, timings",
    "cross_attention": "the cross-attention map of every decoder layer and head (the page's heat map)",
    "decoder_input_details": "TGI's details.prefill: the decoder's input tokens (its start token) before the output",
}
FIELDS = {"inputs": "a text, or a list of texts", "parameters": "generation options, and the server's own"}


class RequestError(Exception):
    """A refused request: an HTTP status and one sentence (and the field it is about, where one is: OpenAI's
    error shape names it)."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.param = status, param


@dataclass(frozen=True)
class Limits:
    """The server's bounds on a request (encdec serve's options)."""

    max_body_bytes: int = 1 << 20
    max_inputs: int = 32  # texts in one request
    max_input_chars: int = 20_000  # characters of one text (its tokens are cut at the model's source length)
    max_new_tokens: int = 512
    max_beams: int = 8  # num_beams, num_return_sequences
    max_queue: int = 64  # requests waiting or running; one more is answered 503
    max_audio_bytes: int = 25 << 20  # an uploaded recording's bytes (OpenAI's bound: 25 MB)
    max_audio_seconds: int = 3600  # an uploaded recording's length, read from its header before its samples


@dataclass
class GenerateRequest:
    inputs: list[str]
    single: bool  # "inputs" was one text: the answer is one object, not a list
    options: dict[str, Any]  # generation options, checked
    details: bool = False
    cross_attention: bool = False
    decoder_input_details: bool = False


def parse_body(body: bytes, limits: Limits, defaults: dict | None = None, stream: bool = False) -> GenerateRequest:
    """The request a body holds, or a RequestError saying in one sentence what is wrong with it; options are
    checked over the model's generation `defaults`, as generate applies them."""
    return parse_value(json_body(body, limits), limits, defaults, stream)


def json_body(body: bytes, limits: Limits) -> dict[str, Any]:
    """The JSON object a body holds (400 not JSON, 413 too large, 422 not an object)."""
    if len(body) > limits.max_body_bytes:
        raise RequestError(413, f"the request body is more than {limits.max_body_bytes:,} bytes")
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise RequestError(400, f"the request body is not valid JSON ({type(error).__name__})") from None
    if not isinstance(value, dict):
        raise RequestError(422, f"the request body must be a JSON object, got {short(value)}")
    return value


def parse_value(value: dict, limits: Limits, defaults: dict | None = None, stream: bool = False) -> GenerateRequest:
    """parse_body's request from the body's JSON object."""
    unknown = [key for key in value if key not in FIELDS]
    if unknown:
        raise RequestError(422, f"unknown field {short(unknown[0])}; a request has inputs and parameters")
    inputs, single = check_inputs(value.get("inputs"), limits)
    parameters = value.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise RequestError(422, f"parameters must be a JSON object, got {short(parameters)}")
    extras = {name: parameters.get(name, False) for name in EXTRAS}
    for name, flag in extras.items():
        if not isinstance(flag, bool):
            raise RequestError(422, f"parameters.{name} must be true or false, got {short(flag)}")
    options = check_options({k: v for k, v in parameters.items() if k not in EXTRAS}, limits, defaults)
    effective = {**(defaults or {}), **options}
    if stream and (effective.get("num_beams", 1) > 1 or effective.get("num_return_sequences", 1) > 1 or not single):
        raise RequestError(422, "generate_stream streams one input's greedy or sampled tokens; use /generate for beams")
    return GenerateRequest(inputs, single, options, **extras)


def check_inputs(inputs: Any, limits: Limits) -> tuple[list[str], bool]:
    single = isinstance(inputs, str)
    texts = [inputs] if single else inputs
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise RequestError(422, f"inputs must be a text or a non-empty list of texts, got {short(inputs)}")
    if len(texts) > limits.max_inputs:
        raise RequestError(422, f"a request holds at most {limits.max_inputs} inputs, got {len(texts)}")
    for i, text in enumerate(texts):
        if not text.strip():
            raise RequestError(422, f"input {i} is empty: there is nothing to generate from")
        if len(text) > limits.max_input_chars:
            raise RequestError(
                422, f"input {i} has {len(text):,} characters; the server takes {limits.max_input_chars:,}"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:  # JSON's \ud800 escapes decode to text that no encoder takes
            raise RequestError(
                422, f"input {i} is not valid Unicode: character {error.start} is a lone surrogate"
            ) from None
    return texts, single


def check_options(options: dict, limits: Limits, defaults: dict | None = None) -> dict:
    """Known options, valid as GenerationConfig declares them over the model's `defaults`, within the
    server's bounds."""
    for name in options:
        if name not in OPTIONS:
            raise RequestError(422, f"unknown parameter {short(name)}{suggestion(name, [*OPTIONS, *EXTRAS])}")
    try:
        config = GenerationConfig.from_options(defaults, **options)
    except ConfigError as error:
        raise RequestError(422, f"parameters: {error}") from None
    bounds = {"max_new_tokens": limits.max_new_tokens, "num_beams": limits.max_beams}
    bounds["num_return_sequences"] = limits.max_beams
    bounds["mbr"] = limits.max_beams  # MBR's samples: rows as beams are
    for name, most in bounds.items():
        if (getattr(config, name) or 0) > most:
            raise RequestError(
                422, f"parameters.{name} is {getattr(config, name):,}; this server allows at most {most:,}"
            )
    return options


def request_schema() -> dict[str, Any]:
    """The request body as the server's OpenAPI document (/openapi.json) declares it, made from the names
    parse_body checks against (FIELDS, OPTIONS with GenerationConfig's help, EXTRAS): what a client reads,
    and what the fuzz tests walk field by field, so a field added to any of them is documented and walked."""
    helps = {f.name: f.metadata.get("help", "") for f in fields(GenerationConfig)}
    parameters = {name: {"description": helps[name]} for name in OPTIONS}
    parameters |= {name: {"type": "boolean", "description": text} for name, text in EXTRAS.items()}
    texts = {"type": "array", "items": {"type": "string"}, "minItems": 1}
    properties = {
        "inputs": {"anyOf": [{"type": "string"}, texts]},
        "parameters": {"type": "object", "properties": parameters, "additionalProperties": False},
    }
    for name, text in FIELDS.items():
        properties[name]["description"] = text
    return {"type": "object", "properties": properties, "required": ["inputs"], "additionalProperties": False}
