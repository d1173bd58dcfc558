"""A request checked whole before any byte of its answer is sent: the one check every route that generates
calls first, so /generate and /generate_stream refuse the same request with the same 4xx sentence.

    read_body      the body, bounded by --max-body-bytes (413), a client gone while sending it Abandoned
    check_request  the body against the declared request (serving.requests.parse_body: 400, 413, 422); each
                   input encoded as `encdec generate` encodes it, its src_lang and tgt_lang checked against the
                   tokenizer; its options resolved and checked as `generate` checks them, with what the server
                   cannot step (Scheduler.check: a sampling option without do_sample, a token id the model
                   lacks, the stream's streamer beside beams): 422

What only the model can refuse, while it starts on an input (T5Gemma 2's image token), comes after this:
/generate answers it as a 422 and /generate_stream holds its headers until its first token for that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from encdec.generation.text_generator import TextGenerator
from encdec.serving.requests import GenerateRequest, Limits, RequestError, parse_body
from encdec.serving.scheduler import Abandoned, Scheduler

DRAIN_BYTES = 16 << 20  # an oversized body up to this beyond the limit is read and dropped before its 413


@dataclass
class CheckedInput:
    """One input of a checked request: its text, its encoding (input_ids, attention_mask (1, S)) and the
    options `generate` runs it with (the model's defaults under the request's, the tokenizer its languages
    read: TextGenerator.options)."""

    text: str
    encoded: dict[str, Any]
    options: dict[str, Any]


@dataclass
class Checked:
    """A request that passed every check that can be made before it runs."""

    request: GenerateRequest
    inputs: list[CheckedInput]
    eos: set[int]  # the ids generation stops at


def check_request(
    body: bytes, limits: Limits, text, defaults: dict, scheduler: Scheduler, stream: bool = False
) -> Checked:
    """`body` checked whole for a server whose model encodes with `text` (through the one TextGenerator), has
    generation `defaults` and runs under `scheduler`; a RequestError or an EncdecError, one sentence, for the
    first thing wrong. For a stream (`stream`) the options are checked with a streamer, as they run."""
    return check_parsed(parse_body(body, limits, defaults, stream=stream), text, defaults, scheduler, stream)


def check_parsed(
    request: GenerateRequest, text, defaults: dict, scheduler: Scheduler, stream: bool = False, scored: bool = False
) -> Checked:
    """A request parsed from its route's declared body (serving.requests, serving.api_requests) checked as
    check_request checks it; `scored`: each step's scores kept (a stream's per-token log-probabilities)."""
    generator = TextGenerator(text, defaults)
    src_lang = request.options.get("src_lang")
    inputs, eos = [], set()
    for text_in in request.inputs:
        encoded = generator.encode([text_in], src_lang)
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        options = generator.options(**request.options)
        if request.details or scored:
            options |= {"output_scores": True, "return_dict_in_generate": True}
        job = scheduler.check(ids, mask, options | ({"streamer": discard} if stream else {}))
        inputs.append(CheckedInput(text_in, encoded, options))
        eos = set(job.cfg.eos_ids)
    return Checked(request, inputs, eos)


def discard(tokens) -> None:
    """The streamer a stream's options are checked with (its own is made once it runs)."""


async def read_body(request: Request, limits: Limits) -> bytes:
    """The request body, kept no further than --max-body-bytes bytes (413 beyond, whatever Content-Length says).
    An oversized body up to DRAIN_BYTES beyond the limit is read to its end and dropped before the 413, so
    that a client still writing it gets the answer instead of a broken pipe (a lingering close); a larger
    one is answered at once."""
    too_large = RequestError(413, f"the request body is more than {limits.max_body_bytes:,} bytes")
    declared, drained = request.headers.get("content-length"), limits.max_body_bytes + DRAIN_BYTES
    if declared is not None and declared.isdigit() and (len(declared) > 18 or int(declared) > drained):
        raise too_large
    body, read = bytearray(), 0
    try:
        async for chunk in request.stream():
            read += len(chunk)
            if read <= limits.max_body_bytes:
                body += chunk
            elif read > drained:
                break
    except ClientDisconnect:  # gone before its body arrived: nothing was admitted
        raise Abandoned("the client is gone") from None
    if read > limits.max_body_bytes:
        raise too_large
    return bytes(body)
