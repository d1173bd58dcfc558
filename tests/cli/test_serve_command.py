"""`encdec serve` called in a process that goes on (a test, a notebook) leaves that process as it found it."""

import signal

import pytest
from run_kit import tiny_pairs_run

from encdec.cli import main


def test_serve_puts_back_the_signal_handlers_it_found(tmp_path, monkeypatch):
    uvicorn = pytest.importorskip("uvicorn")

    async def no_loop(self) -> None:  # started and stopped at once, as a Ctrl-C would
        return None

    monkeypatch.setattr(uvicorn.Server, "main_loop", no_loop)
    run = tiny_pairs_run(tmp_path)

    def mine(signum, frame):
        pass

    previous = {stop: signal.signal(stop, mine) for stop in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert main(["serve", str(run), "--port", "0", "--device", "cpu"]) == 0
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
