"""The server's HTTP/1.1 wire: framing errors answered in the API's JSON, and bounded headers.

uvicorn answers a request it cannot parse (a negative or non-numeric Content-Length, TLS bytes on
the plain port, a header line without a colon, a header section too large) with a plain-text 400
of its own. `JsonWireProtocol` is uvicorn's h11 protocol with that answer in the API's shape,
{"error": one sentence}: 431 when the header section passes MAX_HEADER_BYTES (h11's bound on what
it buffers), else 400 with h11's reason. `HeaderLimit` refuses more than MAX_HEADERS header lines, or
a header section over MAX_HEADER_BYTES that h11 took whole from one read, with a 431 before any route
sees them.
"""

from __future__ import annotations

import json

import h11
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEADERS = 128  # header lines a request may hold
MAX_HEADER_BYTES = 16 << 10  # the request line and header section, as h11 buffers them


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
    """uvicorn's h11 protocol whose answer to malformed framing is a JSON sentence, then the close."""

    def __init__(self, config, server_state, app_state, _loop=None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.conn = RecordingConnection(h11.SERVER, MAX_HEADER_BYTES)

    def send_400_response(self, msg: str) -> None:
        error = self.conn.error
        status = getattr(error, "error_status_hint", 400)
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
        self.transport.close()


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
                await JSONResponse({"error": sentence}, status_code=431)(scope, receive, send)
                return
        await self.app(scope, receive, send)
