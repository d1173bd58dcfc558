"""A real `encdec serve` process on a free port, and plain HTTP calls to it (urllib: nothing between the test
and the wire)."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import torch

import encdec
from encdec.interop import export_hf
from encdec.tokenizers import build_tokenizer


def tiny_model_dir(path: Path, preset: str = "t5-tiny", seed: int = 0, **overrides) -> Path:
    """A Hugging Face directory of a small random model with encdec's byte tokenizer."""
    tokenizer = build_tokenizer("byte", num_sentinels=0)
    torch.manual_seed(seed)
    ids = dict(pad_id=tokenizer.pad_id, eos_id=tokenizer.eos_id, decoder_start_id=tokenizer.decoder_start_id)
    config = encdec.preset(preset, vocab_size=tokenizer.vocab_size, **ids, **overrides)
    export_hf(encdec.build_model(config).eval(), tokenizer, path)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """`encdec serve MODEL ...` in a process of its own, up and answering /health. Its output goes to files,
    not pipes, so that a long test's access log never fills a pipe nobody reads and stalls the server."""

    def __init__(self, model: Path, *options: str, timeout: float = 120.0, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "encdec", "serve", str(model), "--port", str(self.port), "--device", "cpu"]
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        environment = None if env is None else os.environ | env
        self.process = subprocess.Popen([*command, *options], stdout=self.out, stderr=self.err, env=environment)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"encdec serve exited: {self.log()[-2000:]}")
            try:
                if call(self.url + "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.process.kill()  # not left serving after the test that started it
        self.process.wait(timeout=60)
        raise AssertionError("encdec serve did not answer /health in time")

    def log(self) -> str:
        """What the server has written to stderr so far (uvicorn's access log and encdec's)."""
        self.err.seek(0)
        return self.err.read()

    def rss(self) -> int:
        """The server's resident memory in bytes (Linux's /proc)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=60)
        return self.process.returncode, self.log()


def serving(model: Path, *options: str, absent: tuple[str, ...] = ("Traceback",)) -> Iterator[Served]:
    """A module fixture's body (`yield from serving(...)`): the server on `model` with `options`, stopped after
    the module's tests, which must end with exit code 0 and none of `absent` in its log."""
    served = Served(model, *options)
    yield served
    code, err = served.stop()
    assert code == 0 and not any(word in err for word in absent), err[-3000:]


def call(url: str, body: bytes | dict | None = None, headers: dict | None = None, timeout: float = 300):
    """(status, parsed JSON or text, response headers) of a GET, or of a POST of `body`."""
    data = json.dumps(body).encode() if isinstance(body, dict | list) else body
    request = urllib.request.Request(url, data=data, headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text, got = response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, text, got = error.code, error.read().decode(), dict(error.headers)
    try:
        return status, json.loads(text), got
    except ValueError:
        return status, text, got


def metric(url: str, name: str) -> float:
    """The value of an unlabelled metric (or the sum over a labelled one's series) on /metrics."""
    text = call(url + "/metrics")[1]
    values = [float(line.split()[-1]) for line in text.splitlines() if line.split("{")[0].split(" ")[0] == name]
    assert values, f"{name} is not on /metrics"
    return sum(values)


def post_raw(port: int, path: str, body: bytes, declared: int | None = None) -> socket.socket:
    """A socket that has sent a POST of `body` (declaring `declared` bytes, else its length) and reads nothing."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=120)
    head = f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body) if declared is None else declared}\r\n\r\n"
    connection.sendall(head.encode() + body)
    return connection


def exchange(port: int, data: bytes, timeout: float = 60) -> bytes:
    """What the server answers to `data` sent whole on a fresh connection, then half-closed, until it closes
    (or `timeout`, a hang detector, passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
        return answer
