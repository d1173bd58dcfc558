"""Malformed HTTP against a real `encdec serve`: each framing error, header flood, unknown path or wrong method
is answered in the API's shape, {"error": one sentence} with its 4xx, and text that no encoder takes is a 422."""

import json
import socket

import pytest
from server_kit import call, exchange, serving, tiny_model_dir

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tiny_model_dir(tmp_path_factory.mktemp("wire") / "t5"))


def headers(n: int, size: int = 1) -> bytes:
    return b"".join(b"x-%d: %s\r\n" % (i, b"v" * size) for i in range(n))


CASES = {
    "negative Content-Length": (
        b"POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\n",
        400,
        "not valid HTTP",
    ),
    "Content-Length of 5,000 digits": (
        b"POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n",
        400,
        "not valid HTTP",
    ),
    "Content-Length of 10^19": (
        b"POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: " + b"9" * 19 + b"\r\n\r\n",
        413,
        "more than 1,048,576 bytes",
    ),
    "two Content-Lengths": (
        b"POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        400,
        "not valid HTTP",
    ),
    "TLS on the plain port": (
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),
        400,
        "not valid HTTP",
    ),
    "3,000 header lines": (b"GET /health HTTP/1.1\r\nHost: t\r\n" + headers(3000) + b"\r\n", 431, "header"),
    "200 header lines": (b"GET /health HTTP/1.1\r\nHost: t\r\n" + headers(200) + b"\r\n", 431, "header lines"),
    "a 60 KiB header section": (b"GET /health HTTP/1.1\r\nHost: t\r\n" + headers(30, 2000) + b"\r\n", 431, "header"),
    "a header line without a colon": (b"GET /health HTTP/1.1\r\nHost: t\r\nnocolon\r\n\r\n", 400, "not valid HTTP"),
    "an unknown path": (b"GET /nothing HTTP/1.1\r\nHost: t\r\n\r\n", 404, "no such path '/nothing'"),
    "a wrong method": (b"DELETE /generate HTTP/1.1\r\nHost: t\r\n\r\n", 405, "DELETE is not allowed here"),
    "a bad chunk": (
        b"POST /generate HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        400,
        "not valid HTTP",
    ),
}


@pytest.mark.parametrize("data, status, says", CASES.values(), ids=CASES.keys())
def test_malformed_http_is_a_json_sentence(server, data, status, says):
    answer = exchange(server.port, data)
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), answer[:300]
    assert b"content-type: application/json" in head.lower()
    length = int(
        next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
    )
    error = json.loads(rest[:length])
    assert set(error) == {"error"} and says in error["error"] and "\n" not in error["error"]
    assert call(server.url + "/health")[0] == 200


@pytest.mark.parametrize("route", ["/generate", "/generate_stream"])
@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", ["fine", "x\udbff"]])
def test_text_with_a_lone_surrogate_is_a_422_sentence(server, route, text):
    if route == "/generate_stream" and isinstance(text, list):
        text = text[1]
    status, answer, _ = call(server.url + route, json.dumps({"inputs": text}).encode())
    assert status == 422 and "lone surrogate" in answer["error"], answer


def send_in_pieces(port: int, data: bytes, pieces: int) -> bytes:
    """`data` written in `pieces` writes on a fresh connection never half-closed, as a client that is still
    writing when the answer comes; then everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        size = -(-len(data) // pieces)
        for at in range(0, len(data), size):
            connection.sendall(data[at : at + size])
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
        return answer


@pytest.mark.parametrize("pieces", [1, 10, 2000], ids=["whole", "in 10 writes", "a line a write"])
@pytest.mark.parametrize("value", [1, 40], ids=["short lines", "long lines"])
def test_a_header_flood_still_being_written_is_answered_431_not_reset(server, pieces, value):
    """2,000 header lines (16 KiB to 100 KiB) to a server that refuses them once it has read 16 KiB: the
    refused client, still writing, reads a 431 status line and sentence, not a reset connection."""
    data = b"GET /health HTTP/1.1\r\nHost: t\r\n" + headers(2000, value) + b"Connection: close\r\n\r\n"
    answer = send_in_pieces(server.port, data, pieces)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:300]
    error = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert set(error) == {"error"} and "header" in error["error"]
    assert call(server.url + "/health")[0] == 200
