"""The bodies of the routes that speak the clients' own APIs, declared beside /generate's (serving.requests) and
read into the same GenerateRequest, so one check (serving.validate.check_parsed) runs them all.

    POST /                {"inputs": "...", "parameters": {...TGI's...}, "stream": false}     TGI's `/`
    POST /v1/completions  {"model": "...", "prompt": "..." | [...], "max_tokens": 16, ...}  OpenAI's

TGI's parameters are /generate's (Hugging Face's option names) with TGI's own beside them (`TgiParameters`):
`stop` is stop_strings; what encdec does not do (best_of above 1, watermark, grammar, adapters, ...) is a 422
in one sentence when asked for, and taken when a client sends it switched off (huggingface_hub's sends
`details: false`). OpenAI's completion fields (`CompletionRequest`) become generation options: temperature 0
is greedy, above 0 sampling over the whole vocabulary (top_k off) within top_p; n is num_return_sequences
(n samples of a prompt share its encoder pass: its rows are copies of one start), max_tokens max_new_tokens.
Every field is declared with its rule (encdec.schema), and bounded by the server's Limits where they say more.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Annotated, Any

from encdec.errors import ConfigError
from encdec.schema import Range, Satisfies, read, short
from encdec.serving.requests import (
    GenerateRequest,
    Limits,
    RequestError,
    check_inputs,
    json_body,
    parse_value,
    request_schema,
)

MAX_STOPS = 4  # stop strings a request gives (OpenAI's and TGI's bound)
MAX_STOP_CHARS = 200
MAX_LOGPROBS = 5  # alternatives a token lists (OpenAI's bound)


def valid_stops(value) -> bool:
    stops = [value] if isinstance(value, str) else value
    return (
        isinstance(stops, list)
        and len(stops) <= MAX_STOPS
        and all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS and unicode(s) for s in stops)
    )


def unicode(text: str) -> bool:
    """Whether `text` is valid Unicode (JSON's \\ud800 escapes decode to text no encoder takes)."""
    return not any("\ud800" <= c <= "\udfff" for c in text)


Stops = Annotated[
    str | list[str],
    Satisfies(valid_stops, f"a text or a list of at most {MAX_STOPS} Unicode texts of 1 to {MAX_STOP_CHARS}"),
]


def only(neutral, says: str) -> Satisfies:
    """The rule of a field taken only as its `neutral` value (`says`: which, and why): what encdec does not do
    (a number's neutral value as an integer or a float, a flag's as a boolean)."""
    kinds = (bool,) if isinstance(neutral, bool) else (int, float)
    return Satisfies(lambda value: type(value) in kinds and value == neutral, says)


@dataclass(frozen=True)
class TgiParameters:
    """TGI's parameters that /generate's options do not name; the rest of `parameters` is /generate's."""

    stop: Stops | None = None  # stop_strings
    best_of: Annotated[int, only(1, "1: encdec does not rerank samples (ask num_return_sequences)")] | None = None
    return_full_text: (
        Annotated[bool, only(False, "false: an encoder-decoder's output never holds its input")] | None
    ) = None
    watermark: Annotated[bool, only(False, "false: outputs are not watermarked")] | None = None
    truncate: Annotated[int, Satisfies(lambda v: False, "null: inputs are cut at the model's source length")] | None = (
        None
    )
    top_n_tokens: Annotated[int, only(0, "0: a token's alternatives are /v1/completions' logprobs")] | None = None
    adapter_id: Annotated[str, Satisfies(lambda v: False, "null: this server has no adapters")] | None = None
    grammar: Annotated[dict, Satisfies(lambda v: False, "null: constrained decoding is not served")] | None = None
    frequency_penalty: Annotated[float, only(0, "0: ask repetition_penalty")] | None = None


TGI_NAMES = {f.name for f in fields(TgiParameters)}
TGI_FIELDS = {"stream": "TGI's `/`: server-sent events, one per token (as /generate_stream), else /generate's answer"}


def parse_tgi(body: bytes, limits: Limits, defaults: dict | None) -> tuple[GenerateRequest, bool]:
    """TGI's `/` body -> (the request, whether it streams); a RequestError in one sentence."""
    value = json_body(body, limits)
    stream = value.pop("stream", None)
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(422, f"stream must be true or false, got {short(stream)}")
    parameters, stops = value.get("parameters"), None
    if isinstance(parameters, dict):  # else parse_value says what is wrong with it
        own = {name: parameters.pop(name) for name in TGI_NAMES & set(parameters)}
        stops = read_declared(TgiParameters, own, "parameters.").stop
    request = parse_value(value, limits, defaults, stream=bool(stream))
    return with_stops(request, stops), bool(stream)


def with_stops(request: GenerateRequest, stops: str | list[str] | None) -> GenerateRequest:
    """`request` stopping at `stops` (generate's stop_strings, which /generate's parameters do not name)."""
    if stops:
        request.options["stop_strings"] = [stops] if isinstance(stops, str) else stops
    return request


def read_declared(cls: type, values: Any, prefix: str = ""):
    """`cls` read from `values` by its declaration (encdec.schema.read), a refusal a 422 naming its field."""
    try:
        return read(cls, values, prefix)
    except ConfigError as error:
        words = str(error).split()
        key = words[2] if words[:2] == ["unknown", "key"] else words[0]
        raise RequestError(422, str(error), param=key.rstrip(";,").removeprefix(prefix)) from None


def texts(value) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(text, str) for text in value))


def name_of(fewest: int):
    """The test of a name of `fewest` to 200 characters, valid Unicode (it is sent back)."""
    return lambda value: isinstance(value, str) and fewest <= len(value) <= 200 and unicode(value)


@dataclass(frozen=True)
class CompletionRequest:
    """OpenAI's completion request (its legacy /v1/completions), each field with its rule; n, max_tokens and the
    prompts are bounded by the server's Limits too (completion_request)."""

    prompt: Annotated[str | list[str], Satisfies(texts, "a text or a list of texts")]
    model: Annotated[str, Satisfies(name_of(1), "a Unicode name of 1 to 200 characters")] | None = None
    max_tokens: Annotated[int, Range(1)] | None = 16  # OpenAI's default
    temperature: Annotated[float, Range(0, 2)] | None = 1.0  # 0: greedy
    top_p: Annotated[float, Range(0, 1, above=True)] | None = 1.0
    n: Annotated[int, Range(1)] | None = 1
    stop: Stops | None = None
    seed: Annotated[int, Range(0, 2**63 - 1)] | None = None
    logprobs: Annotated[int, Range(0, MAX_LOGPROBS)] | None = None
    echo: bool | None = False
    stream: bool | None = False
    user: Annotated[str, Satisfies(name_of(0), "a Unicode name of at most 200 characters")] | None = None
    best_of: Annotated[int, only(1, "1: encdec does not rerank samples (ask n)")] | None = None
    presence_penalty: Annotated[float, only(0, "0: encdec has no presence penalty")] | None = None
    frequency_penalty: Annotated[float, only(0, "0: encdec has no frequency penalty")] | None = None
    suffix: Annotated[str, Satisfies(lambda v: False, "null: an encoder-decoder does not fill in")] | None = None
    logit_bias: Annotated[dict, Satisfies(lambda v: v == {}, "empty: logit_bias is not served")] | None = None


@dataclass
class Completion:
    """A checked completion request: OpenAI's fields (`asked`), and the generation request they make."""

    asked: CompletionRequest
    request: GenerateRequest
    copies: int  # choices per prompt that one generation gives (n greedy choices are one output, n times)


def completion_request(body: bytes, limits: Limits, defaults: dict | None) -> Completion:
    """OpenAI's completion body -> its generation request, checked as /generate's is (parse_value)."""
    asked = read_declared(CompletionRequest, json_body(body, limits))
    n, max_tokens = asked.n or 1, asked.max_tokens or 16
    for name, value, most in [("max_tokens", max_tokens, limits.max_new_tokens), ("n", n, limits.max_beams)]:
        if value > most:
            raise RequestError(422, f"{name} is {value:,}; this server allows at most {most:,}", param=name)
    try:
        check_inputs(asked.prompt, limits)
    except RequestError as error:  # an empty prompt, too many or too long: its sentence, about the prompt
        raise RequestError(error.status, str(error), param="prompt") from None
    if asked.stream and (n > 1 or not isinstance(asked.prompt, str)):
        raise RequestError(422, "a stream sends one prompt's one choice: ask n=1 and a single prompt", param="stream")
    if asked.echo and asked.logprobs is not None:
        raise RequestError(
            422, "echo with logprobs is not served: the prompt is read by the encoder, which gives it none", "echo"
        )
    options: dict[str, Any] = {"max_new_tokens": max_tokens, "num_beams": 1, "do_sample": False}
    temperature = 1.0 if asked.temperature is None else asked.temperature
    if temperature > 0:  # OpenAI samples the whole vocabulary: no top-k
        options |= {"do_sample": True, "temperature": temperature, "top_p": asked.top_p or 1.0, "top_k": 0}
        options |= {"num_return_sequences": n} | ({"seed": asked.seed} if asked.seed is not None else {})
    details = asked.logprobs is not None
    request = parse_value({"inputs": asked.prompt, "parameters": options | {"details": details}}, limits, defaults)
    return Completion(asked, with_stops(request, asked.stop), 1 if temperature > 0 else n)


def declared_schema(cls: type) -> dict[str, Any]:
    """A body of dataclass `cls`'s fields as /openapi.json declares it (each field with what it allows)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    properties = {f.name: {"description": allows(hints[f.name])} for f in fields(cls)}
    for name, annotation in hints.items():  # a text or a list of texts (a prompt, stop strings)
        if "list[str]" in str(annotation):
            texts_of = {"type": "array", "items": {"type": "string"}}
            properties[name]["anyOf"] = [{"type": "string"}, texts_of]
    required = [f.name for f in fields(cls) if f.default is MISSING]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def allows(annotation) -> str:
    """What a field's declaration allows, in words (its rules' own)."""
    words = []
    while typing.get_origin(annotation) in (typing.Union, types.UnionType, Annotated):
        args = typing.get_args(annotation)
        if typing.get_origin(annotation) is Annotated:
            words += [said(rule) for rule in args[1:]]
        annotation = args[0]
    return "; ".join(w for w in [getattr(annotation, "__name__", str(annotation)), *words] if w)


def said(rule) -> str:
    """A rule's words: a Satisfies' own, a Range's bounds."""
    if isinstance(rule, Range) and rule.says is None:
        return " ".join(
            f"{word} {bound:g}" for word, bound in [("from", rule.lo), ("to", rule.hi)] if bound is not None
        )
    return rule.says or ""


def tgi_schema() -> dict[str, Any]:
    """`/`'s body as /openapi.json declares it: /generate's, TGI's parameters and stream beside."""
    schema = request_schema()
    tgi = declared_schema(TgiParameters)["properties"]
    schema["properties"]["parameters"]["properties"] |= tgi
    schema["properties"] |= {name: {"type": "boolean", "description": text} for name, text in TGI_FIELDS.items()}
    return schema
