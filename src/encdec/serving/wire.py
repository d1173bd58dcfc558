"""The server's HTTP/1.1 wire: framing errors answered in the API's JSON, and bounded headers.

uvicorn answers a request it cannot parse (a negative or non-numeric Content-Length, TLS bytes on
the plain port, a header line without a colon, a header section too large) with a plain-text 400
of its own, then closes at once: a client still sending its request gets a reset instead of the
answer. `JsonWireProtocol` is uvicorn's h11 protocol with that answer in the API's shape,
{"error": one sentence}: 431 when the header section passes MAX_HEADER_BYTES (h11's bound on what
it buffers, uvicorn's h11_max_incomplete_event_size), else 400 with h11's reason; then it closes
lingering (`linger`), so that the answer reaches a client still writing. `HeaderLimit` refuses more than MAX_HEADERS header lines, or
a header section over MAX_HEADER_BYTES that h11 took whole from one read, with a 431 before any route
sees them (in OpenAI's error object on /v1; a framing error, whose path is not known, in TGI's shape).
"""

from __future__ import annotations

import json

import h11
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from encdec.serving.openai_errors import error_body, speaks_openai

MAX_HEADERS = 128  # header lines a request may hold
MAX_HEADER_BYTES = 16 << 10  # the request line and header section, as h11 buffers them
LINGER_BYTES = 1 << 20  # what a refused client may still send, read and dropped, before the close
LINGER_SECONDS = 5.0  # ... and for how long


class RecordingConnection(h11.Connection):
    """h11's connection, keeping the last protocol error it raised (uvicorn's handler drops it)."""

    error: h11.RemoteProtocolError | None = None

    def next_event(self):
        try:
            return super().next_event()
        except h11.RemoteProtocolError as error:
            self.error = error
            raise


class JsonWireProtocol(H11Protocol):
    """uvicorn's h11 protocol whose answer to malformed framing is a JSON sentence, then a lingering close."""

    def __init__(self, config, server_state, app_state, _loop=None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.conn = RecordingConnection(h11.SERVER, MAX_HEADER_BYTES)
        self.lingering: int | None = None  # bytes still dropped before the close, once the answer is sent

    def data_received(self, data: bytes) -> None:
        if self.lingering is None:
            super().data_received(data)
            return
        self.lingering -= len(data)
        if self.lingering < 0:
            self.transport.close()

    def eof_received(self) -> bool | None:
        if self.lingering is not None:
            return None  # the client has sent all it had: the transport closes
        return super().eof_received()

    def linger(self) -> None:
        """Half-close, then read and drop what the client still sends (at most LINGER_BYTES, LINGER_SECONDS)
        before closing, as nginx's lingering_close does: a client still writing the request the answer
        refuses (2,000 header lines sent a line at a time) reads that answer, where a close with its bytes
        unread would reset the connection and lose it."""
        self.lingering = LINGER_BYTES
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def send_400_response(self, msg: str) -> None:
        error = self.conn.error
        # h11's hint, but a transfer coding it does not know (501, RFC 9112's advice) is the client's bad input: 400
        status = 431 if getattr(error, "error_status_hint", 400) == 431 else 400
        if status == 431:
            sentence = f"the request's header section is more than {MAX_HEADER_BYTES:,} bytes"
        else:
            reason = str(error or msg).rstrip(".")
            sentence = f"the request is not valid HTTP/1.1 ({reason[:1].lower() + reason[1:][:120]})"
        body = json.dumps({"error": sentence}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        headers.append((b"connection", b"close"))
        reason_phrase = b"Request Header Fields Too Large" if status == 431 else b"Bad Request"
        for event in (
            h11.Response(status_code=status, headers=headers, reason=reason_phrase),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.linger()


class HeaderLimit:
    """ASGI middleware: a request of more than MAX_HEADERS header lines is a 431 sentence."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            size = sum(len(name) + len(value) + 4 for name, value in headers)  # "name: value\r\n"
            sentence = None
            if len(headers) > MAX_HEADERS:
                sentence = f"the request has {len(headers):,} header lines; the server takes {MAX_HEADERS}"
            elif size > MAX_HEADER_BYTES:  # a section that reached h11 whole, in one read, is not bounded there
                sentence = f"the request's header section is more than {MAX_HEADER_BYTES:,} bytes"
            if sentence is not None:
                body = error_body(431, sentence) if speaks_openai(scope["path"]) else {"error": sentence}
                await JSONResponse(body, status_code=431)(scope, receive, send)
                return
        await self.app(scope, receive, send)
