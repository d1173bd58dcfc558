"""`encdec serve MODEL`: an HTTP server with continuous batching and a page to try the model.

MODEL is a run directory, a Hugging Face directory or a Hub id. The server listens on 127.0.0.1
(--host 0.0.0.0 opens it to the network) and answers TGI's request shape:

    curl -s localhost:8000/generate -H 'Content-Type: application/json' \\
         -d '{"inputs": "A man rides a bike.", "parameters": {"num_beams": 4}}'
    {"generated_text": "..."}

POST /generate_stream streams tokens as server-sent events; POST /score gives given targets' token
log-probabilities ({"inputs": [{"source": ..., "target": ...}]}, as `encdec score`); GET /health, GET /metrics;
GET / is a page with a text box, options, beam alternatives and the output's cross-attention map.
Every output equals `encdec generate` on that input alone. A speech model (Whisper) answers OpenAI's
POST /v1/audio/transcriptions and /v1/audio/translations instead (a multipart upload; response_format json,
text, srt, verbose_json or vtt), its recordings cut at pauses and their pieces batched with the others'.
Bounds: --max-body-bytes, --max-inputs, --max-input-chars, --max-new-tokens, --max-beams, --max-audio-bytes,
--max-audio-seconds, and --max-queue inputs in flight (one more is a 503); SIGTERM or Ctrl-C stops taking
requests, finishes those in flight and exits 0. With --draft DRAFT (and --num-assistant-tokens, --draft-shares-encoder,
--draft-quantize, as `encdec generate` takes them) the greedy and sampling requests of one output are decoded
speculatively inside the continuous batch, each row keeping its own count of accepted drafts
(serving.speculative_rows); the others step as without it. Needs the `serve` extra (pip install encdec[serve]).
"""

import argparse
import dataclasses
import errno
import logging
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from encdec.audio.recordings import MAX_SECONDS
from encdec.cli.draft_model import add_draft_arguments, open_draft
from encdec.cli.options import (
    add_checkpoint_argument,
    add_device_argument,
    add_dtype_argument,
    add_quantize_argument,
    add_source_length_argument,
    open_to_decode,
    resolve_device,
    whole_number,
)
from encdec.cli.output_paths import add_model_argument
from encdec.errors import ConfigError
from encdec.serving.requests import Limits

log = logging.getLogger(__name__)


def bounds() -> dict[str, tuple[int, int, str]]:
    """--max-* option -> (its largest value, its default, its help); the defaults are serving.Limits'."""
    defaults = {"max_batch_rows": 64, **{f.name: f.default for f in dataclasses.fields(Limits)}}
    helps = {
        "max_batch_rows": (4096, "rows of the running decoder batch (a beam request holds one per beam)"),
        "max_queue": (4096, "inputs in flight, waiting or running; one more is answered 503"),
        "max_inputs": (1024, "inputs a request"),
        "max_input_chars": (1 << 24, "characters of one input (its tokens are cut at the model's source length)"),
        "max_new_tokens": (1 << 16, "the most max_new_tokens a request may ask"),
        "max_beams": (64, "the most num_beams / num_return_sequences a request may ask"),
        "max_body_bytes": (1 << 30, "bytes of one request body"),
        "max_audio_bytes": (1 << 32, "bytes of one uploaded recording (/v1/audio/transcriptions)"),
        "max_audio_seconds": (int(MAX_SECONDS), "seconds of one uploaded recording, read from its header"),
    }
    return {name: (most, defaults[name], text) for name, (most, text) in helps.items()}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("serve", description=__doc__)
    add_model_argument(parser, "a run directory, a Hugging Face directory or a Hub id (org/name[@revision])")
    add_checkpoint_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    parser.add_argument("--port", type=whole_number(0, 65535, "--port"), default=8000, help="0: any free port")
    for name, (most, default, text) in bounds().items():  # defaults: the server's own (Limits), one place
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=whole_number(1, most, flag), default=default, help=text)
    add_source_length_argument(parser)
    add_dtype_argument(parser)
    add_device_argument(parser)
    add_quantize_argument(parser)
    add_draft_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from encdec.serving.app import build_app
        from encdec.serving.speculative_rows import ServedDraft
        from encdec.serving.wire import JsonWireProtocol
    except ImportError as error:
        raise ConfigError(f"encdec serve needs the serve extra ({error.name} is missing): pip install encdec[serve]")
    from encdec.quantization import quantize

    check_port_free(args.host, args.port)
    device = resolve_device(args.device)

    if args.draft is None:
        open_draft(args, None, device)  # the draft's options without --draft: one sentence
    loaded = []

    def load():  # in the scheduler's thread, the one that computes (serving.scheduler says why)
        opened = open_to_decode(args.model, args, device, args.max_source_len)
        opened.text  # a Hugging Face directory without tokenizer files is refused before the server starts
        if args.draft is None:  # with a draft, once the draft is taken too: a refused draft's sentence stands alone
            print(opened.said, file=sys.stderr, flush=True)  # which checkpoint, and why: at once, as it serves
        opened.model.to(device)
        if args.quantize:
            opened.model = quantize(opened.model, args.quantize)
        loaded.append(opened)
        return opened

    def load_draft():  # after the model, in the same thread
        draft_model = open_draft(args, loaded[0], device).model
        print(loaded[0].said, file=sys.stderr, flush=True)
        return draft_model

    draft = None
    if args.draft is not None:
        k = {} if args.draft_tokens is None else {"num_assistant_tokens": args.draft_tokens}
        draft = ServedDraft(load_draft, args.draft_shares_encoder, **k)
    limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
    app = build_app(load, limits, args.max_batch_rows, draft)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        http=JsonWireProtocol,
        log_level="info",
        log_config=None,  # uvicorn_logs: its own dictConfig would close every logging handler the process has
        timeout_graceful_shutdown=None,
    )
    server = uvicorn.Server(config)
    print(f"serving {args.model} at http://{args.host}:{args.port} (the page at /, the API at /generate)", flush=True)
    # uvicorn drains on SIGTERM / SIGINT, then raises the signal again under the handlers it found: these make
    # that a clean exit 0, not a death by the signal
    previous = {stop: signal.signal(stop, lambda signum, frame: None) for stop in (signal.SIGTERM, signal.SIGINT)}
    try:
        with uvicorn_logs():
            server.run()
    finally:  # an in-process caller (a test, a notebook) gets its own handlers back
        for stop, handler in previous.items():
            signal.signal(stop, handler)
    print("stopped: every request in flight was answered", flush=True)
    return 0


@contextmanager
def uvicorn_logs() -> Iterator[None]:
    """uvicorn's lines as its default configuration writes them (its notes on stderr, the access log on stdout),
    set on its own loggers for the block and taken off after: its logging.config.dictConfig would have closed
    every handler the process had (a notebook's, a test runner's)."""
    from uvicorn.logging import AccessFormatter, DefaultFormatter

    access = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    added = []
    for name, stream, formatter in (
        ("uvicorn", sys.stderr, DefaultFormatter("%(levelprefix)s %(message)s")),
        ("uvicorn.access", sys.stdout, AccessFormatter(access)),
    ):
        logger, handler = logging.getLogger(name), logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        added.append((logger, handler, logger.level, logger.propagate))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handler, level, propagate in added:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


def check_port_free(host: str, port: int) -> None:
    """One sentence now where the address cannot be listened on, rather than uvicorn's log lines later."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        why = "it is in use" if error.errno == errno.EADDRINUSE else error.strerror
        raise ConfigError(f"cannot listen on {host}:{port}: {why}") from None
