"""data.streaming: a corpus larger than the memory budget trains in constant memory, and a run killed
with SIGKILL resumes to the same losses, streamed alone or as a member of a mixture."""

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from encdec.runs.checkpoint import load_checkpoint
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import read_metrics
from tests.training.test_resume import killed_and_resumed, losses

BUDGET_MB = {"jsonl": 64, "datasets": 320}  # growth of the peak RSS allowed while a whole pass is read
CORPUS_MB = 400

READ_A_PASS = """
import resource, sys
from pathlib import Path
from encdec.training.run_config import load_config
from encdec.training.run_data import build_run_data

data = build_run_data(load_config(sys.argv[1]), Path(sys.argv[2]))  # the first block read and tokenized
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
blocks = 0
for epoch in (3, 10**9):  # a step of block 3, then one a whole pass (and more) later: every item read
    batch = data.train.batch_at(epoch, 0)
    blocks = data.train.blocks_per_pass or blocks
    assert batch.labels.shape[0] == 8
print(blocks, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)
"""


def write_corpus(path: Path, megabytes: int) -> int:
    """JSON lines {"text": ...} of short stories made of random words, `megabytes` in all; returns the count."""
    rng = random.Random(0)
    words = "the a cat dog ran sat on mat big small house tree under over quickly slowly happy sad".split()
    lines = [json.dumps({"text": " ".join(rng.choice(words) for _ in range(60))}) + "\n" for _ in range(1000)]
    written = count = 0
    with open(path, "w") as handle:
        while written < megabytes << 20:
            handle.write(lines[count % 1000])
            written += len(lines[count % 1000])
            count += 1
    return count


@pytest.mark.slow
def test_a_corpus_larger_than_the_memory_budget_streams_in_constant_memory(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    documents = write_corpus(corpus, CORPUS_MB)
    script = tmp_path / "read_a_pass.py"
    script.write_text(textwrap.dedent(READ_A_PASS))
    for fmt, budget in BUDGET_MB.items():
        assert CORPUS_MB > budget
        data = {"format": fmt, "train": [str(corpus)], "streaming": True, "stream_block": 2000, "val_fraction": 0.01}
        config = {
            "model": {"preset": "t5-tiny"},
            "tokenizer": {"kind": "byte", "num_sentinels": 8},
            "data": data,
            "objective": {"kind": "span_corruption", "seq_len": 64},
            "training": {"batch_size": 8},
        }
        path = tmp_path / f"{fmt}.yaml"
        path.write_text(yaml.safe_dump(config))
        done = subprocess.run([sys.executable, str(script), str(path), str(tmp_path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        blocks, growth = map(int, done.stdout.split())
        assert blocks * 2000 >= 0.98 * documents  # the pass read holds (nearly: 1% hashed to validation) every one
        assert growth < budget, f"{fmt}: reading a {CORPUS_MB} MB pass raised the peak RSS by {growth} MB"


def streamed(tiny_config: Path, shared_data: Path, mixture: bool) -> Path:
    """The tiny UL2 run reading its stories a story at a time (blocks of one), alone or mixed with DialogSum."""
    values = yaml.safe_load(tiny_config.read_text())
    values["data"].update(streaming=True, stream_block=1)
    if mixture:
        dialogues = {
            "format": "jsonl-pairs",
            "train": [str(shared_data / "summarization/dialogsum/dialogsum.dev.jsonl.gz")],
        }
        members = [
            {"name": "stories", "weight": 2.0, "data": values["data"]},
            {
                "name": "dialogsum",
                "weight": 1.0,
                "data": {**dialogues, "max_documents": 60, "val_fraction": 0.2},
                "objective": {"kind": "seq2seq", "max_source_len": 96, "max_target_len": 32},
            },
        ]
        values["data"] = {"mixture": members}
    path = tiny_config.with_name("streamed.yaml")
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mixture", [False, True], ids=["stream", "mixture"])
def test_a_streamed_run_killed_at_a_random_step_resumes_to_the_same_losses(
    tmp_path, tiny_config, shared_data, device, mixture
):
    config = streamed(tiny_config, shared_data, mixture)
    full, killed = killed_and_resumed(config, tmp_path, device)
    assert losses(killed) == losses(full)  # bitwise, step for step
    evals = [r for r in read_metrics(full / "metrics.jsonl") if r["kind"] == "eval"]
    assert evals == [r for r in read_metrics(killed / "metrics.jsonl") if r["kind"] == "eval"]
    position = load_checkpoint(RunDir(full).latest())["state"]["data"]
    assert position["objective"] == ("mixture" if mixture else "stream_ul2")
    assert position["step" if mixture else "epoch"] >= 2  # past the first blocks (stream) or draws (mixture)
