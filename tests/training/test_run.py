import json
import subprocess
import sys

import torch

from encdec.runs.load import load_run
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import read_metrics


def encdec(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`python -m encdec ARGS` in a child process, its output captured as text; a non-zero exit fails the test."""
    command = [sys.executable, "-m", "encdec", *map(str, args)]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, check=True)


def trained(tmp_path, tiny_config, steps: int):
    """`encdec train` of the tiny config for `steps` steps into tmp_path/run."""
    encdec("train", tiny_config, "--out", tmp_path / "run", "--set", f"training.steps={steps}")
    return tmp_path / "run"


def test_a_finished_run_loads_back_with_the_weights_it_was_evaluated_with(tmp_path, tiny_config):
    run = trained(tmp_path, tiny_config, steps=6)
    assert RunDir(run).is_run() and not RunDir(tmp_path).is_run()
    loaded = load_run(run, "latest")
    assert loaded.checkpoint.name == "step_00000006"
    ids = loaded.tokenizer.encode(["Once upon a time"], add_eos=True)
    src = torch.tensor(ids)
    out = loaded.model(src, src, labels=src)
    assert torch.isfinite(out.loss)
    assert loaded.model.config.vocab_size == loaded.tokenizer.vocab_size


def test_generate_and_evaluate_read_a_run_directory(tmp_path, tiny_config):
    run = trained(tmp_path, tiny_config, steps=6)
    done = encdec(
        "generate", run, "--format", "jsonl", "--max-new-tokens", "5", stdin="Once upon a time\nTom had a ball\n"
    )
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["input"] for r in records] == ["Once upon a time", "Tom had a ball"]
    done = encdec("evaluate", run, "--samples", "3", "--max-new-tokens", "5")
    report = json.loads((run / "eval" / "eval.json").read_text())
    final = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "eval"][-1]
    assert abs(report["scores"]["val_loss"] - final["val_loss"]) < 1e-5  # the same batches the trainer scored
    assert len(report["samples"]) == 3 and "| rougeL |" in done.stdout
    assert "loss over 1 validation batches of" in done.stdout and "--batches N for more" in done.stdout
    encdec("evaluate", run, "--samples", "3", "--max-new-tokens", "5", "--batch-size", "2")
    assert json.loads((run / "eval" / "eval.json").read_text()) == report  # batches of 2 give the same report


def test_generate_and_evaluate_quantize_a_run_to_int8(tmp_path, tiny_config):
    run = trained(tmp_path, tiny_config, steps=4)
    done = encdec(
        "generate", run, "--format", "jsonl", "--quantize", "int8", "--max-new-tokens", "5", stdin="Once upon a time\n"
    )
    assert json.loads(done.stdout)["input"] == "Once upon a time"
    fp32 = encdec("evaluate", run, "--samples", "2", "--max-new-tokens", "5")
    fp32_loss = json.loads((run / "eval" / "eval.json").read_text())["scores"]["val_loss"]
    int8 = encdec("evaluate", run, "--samples", "2", "--max-new-tokens", "5", "--quantize", "int8")
    int8_loss = json.loads((run / "eval" / "eval.json").read_text())["scores"]["val_loss"]
    assert int8_loss != fp32_loss and abs(int8_loss - fp32_loss) < 0.05 * fp32_loss
    assert "tokens/s" in int8.stdout and "tokens/s" in fp32.stdout


def test_a_tie_in_the_score_makes_the_later_checkpoint_best_without_resetting_patience():
    from encdec.training.validation import compare_to_best

    assert compare_to_best(0.5, None) == (True, True)
    assert compare_to_best(0.4, 0.5) == (True, True)
    assert compare_to_best(0.5, 0.5) == (True, False)  # the later checkpoint, trained longer, is kept as best
    assert compare_to_best(0.6, 0.5) == (False, False)
    assert compare_to_best(None, 0.5) == (False, False)
