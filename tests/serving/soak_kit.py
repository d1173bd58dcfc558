"""A soak of the server: `python soak_kit.py MODEL REQUESTS CLIENTS ROUNDS` serves MODEL with uvicorn (the
server's own wire protocol) in this fresh process, sends REQUESTS /generate requests from CLIENTS keep-alive
connections (greedy and seeded sampling mixed, 4 to 8 new tokens, inputs of varied lengths) in ROUNDS rounds,
and after each round, the server idle, measures this process: Python's allocated blocks (a leaked object is
one at least), glibc's live heap (mallinfo2's allocated bytes in every arena: native memory, the free pages
malloc keeps left out) and the resident memory. Prints {"points": [[requests, blocks, heap, rss], ...],
"statuses": {status: count}} as one JSON line. A process of its own, so that what torch and oneDNN hold is
this server's alone."""

import ctypes
import ctypes.util
import gc
import http.client
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import uvicorn
from server_kit import free_port

from encdec.runs.open import open_model
from encdec.serving.app import build_app
from encdec.serving.wire import JsonWireProtocol


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks")]
    _fields_ += [(name, ctypes.c_size_t) for name in ("fsmblks", "uordblks", "fordblks", "keepcost")]


def live_heap() -> int:
    """Bytes malloc has handed out and not had back (0 where the C library has no mallinfo2)."""
    try:
        mallinfo2 = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
    except (OSError, AttributeError, TypeError):
        return 0
    mallinfo2.restype = MallInfo2
    return mallinfo2().uordblks


def rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024


def body(i: int) -> str:
    parameters = {"max_new_tokens": 4 + i % 5} | ({"do_sample": True, "seed": i, "top_k": 20} if i % 2 else {})
    return json.dumps({"inputs": f"request {i} asks for a few words {'x' * (i % 37)}", "parameters": parameters})


def soak(model: Path, requests: int, clients: int, rounds: int) -> dict:
    port = free_port()
    config = uvicorn.Config(build_app(lambda: open_model(model)), port=port, http=JsonWireProtocol, log_level="error")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=300) for _ in range(clients)]
    statuses: Counter = Counter()

    def client(c: int, first: int, end: int) -> None:
        for i in range(first + c, end, clients):
            connections[c].request("POST", "/generate", body(i), {"Content-Type": "application/json"})
            response = connections[c].getresponse()
            response.read()
            statuses[response.status] += 1

    points, per_round = [], requests // rounds
    for r in range(rounds):
        threads = [
            threading.Thread(target=client, args=(c, r * per_round, (r + 1) * per_round)) for c in range(clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        gc.collect()
        points.append([(r + 1) * per_round, sys.getallocatedblocks(), live_heap(), rss()])
    server.should_exit = True
    return {"points": points, "statuses": dict(statuses)}


if __name__ == "__main__":
    model, *numbers = sys.argv[1:]
    print(json.dumps(soak(Path(model), *map(int, numbers))))
