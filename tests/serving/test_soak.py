"""A soak of the server (issue 56): 4,096 /generate requests from 32 keep-alive clients (greedy and seeded
sampling mixed, t5-tiny) against uvicorn serving the app in a fresh process (soak_kit.py), measured between
16 rounds with the server idle. Over the second half, the slope of what the process holds per request is
bounded, not the time it takes:

- Python's allocated blocks: at most 0.25 a request (a per-request object kept anywhere, in a dict, a metrics
  window, a task or a log record, is one at least; the tokens-per-second window kept two until /metrics was
  scraped);
- glibc's live heap, native memory included (torch, oneDNN, the tokenizer): at most 16 KiB a request (a kept
  response body, or a real model's logits for one request, is 64 KiB or more).

Measured on the 2-core CPU (docs/benchmarks.md, "Server memory"): 0.03 blocks and 5.5 KiB a request, the live
heap's remaining rise slowing down. Command:
    cd tests/serving && PYTHONPATH=. OMP_NUM_THREADS=1 python soak_kit.py MODEL_DIR 4096 32 16
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from server_kit import tiny_model_dir

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.slow

REQUESTS, CLIENTS, ROUNDS = 4096, 32, 16
HANG = 1800  # seconds: only a server that stopped answering takes this long, however loaded the machine


def slope(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of y over x."""
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def test_what_the_server_holds_stops_growing_with_the_requests_it_answers(tmp_path):
    model = tiny_model_dir(tmp_path / "t5")
    here = Path(__file__).parent
    command = [sys.executable, str(here / "soak_kit.py"), str(model), str(REQUESTS), str(CLIENTS), str(ROUNDS)]
    environment = {"PYTHONPATH": str(here), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG, env=environment, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["statuses"] == {"200": REQUESTS}
    second_half = result["points"][ROUNDS // 2 :]
    blocks = slope([(n, blocks) for n, blocks, _, _ in second_half])
    heap = slope([(n, heap) for n, _, heap, _ in second_half])
    assert blocks <= 0.25, f"{blocks:.2f} Python blocks kept a request: {result['points']}"
    assert heap <= 16 * 1024, f"{heap / 1024:.1f} KiB of live heap kept a request: {result['points']}"
