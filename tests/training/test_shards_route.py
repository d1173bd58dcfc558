import subprocess
import sys

from encdec.training.metrics import read_metrics


def test_a_run_on_prepared_shards_trains_and_reuses_them(tmp_path, tiny_config):
    shards = tmp_path / "shards"
    command = [
        sys.executable,
        "-m",
        "encdec",
        "train",
        str(tiny_config),
        "--set",
        "training.steps=2",
        "--set",
        f"data.shards={shards}",
    ]
    subprocess.run(command + ["--out", str(tmp_path / "a")], check=True, capture_output=True)
    manifest = (shards / "train" / "manifest.json").stat().st_mtime_ns
    subprocess.run(command + ["--out", str(tmp_path / "b")], check=True, capture_output=True)
    assert (shards / "train" / "manifest.json").stat().st_mtime_ns == manifest  # reused, not rewritten
    losses = [
        [r["loss"] for r in read_metrics(tmp_path / run / "metrics.jsonl") if r["kind"] == "train"]
        for run in ("a", "b")
    ]
    assert losses[0] == losses[1] and len(losses[0]) == 2
