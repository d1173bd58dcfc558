import json
import signal
import subprocess
import sys
import time

import pytest
import yaml

from encdec.cli import main
from encdec.training.metrics import read_metrics


def test_compare_trains_each_run_and_prints_the_seeds_table(capsys, tmp_path, tiny_config):
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(
        yaml.safe_dump(
            {
                "base": tiny_config.name,
                "set": {"training.steps": 3, "evaluation.interval": 3, "output.save_interval": 3},
                "seeds": [1, 2],
                "runs": {"t5": {"model.preset": "t5-tiny"}, "rot5": {}},
            },
            sort_keys=False,
        )
    )
    out = tmp_path / "out"
    assert main(["compare", "--experiment", str(experiment), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| run | train loss | val loss | params | params w/o pos | wall time (s) | tokens/s |" in table
    assert table.count(" ± ") == 4  # two runs, two seeds: mean ± spread of train and val loss
    rows = json.loads((out / "results.json").read_text())
    assert [r["run"] for r in rows] == ["t5", "rot5"]
    assert rows[0]["parameters"] != rows[1]["parameters"]
    assert len(rows[0]["seed_val_losses"]) == 2  # each seed's, for the paired differences of docs/experiments.md
    assert sum(rows[0]["seed_val_losses"]) / 2 == pytest.approx(rows[0]["val_loss"][0])
    assert (out / "curves.png").stat().st_size > 10_000

    metrics = out / "t5" / "seed1" / "metrics.jsonl"
    before = metrics.stat().st_mtime_ns
    assert main(["compare", "--experiment", str(experiment), "--out", str(out)]) == 0  # finished runs are reused
    assert metrics.stat().st_mtime_ns == before
    assert capsys.readouterr().out == table


def test_seed_in_a_value_is_each_runs_own_seed(capsys, tmp_path, tiny_config):
    """A fine-tuning experiment starts each seed from the pretraining run of the same seed."""
    pretrain, finetune = tmp_path / "pretrain.yaml", tmp_path / "finetune.yaml"
    steps = {"training.steps": 2, "evaluation.interval": 2, "output.save_interval": 2}
    pretrain.write_text(yaml.safe_dump({"base": tiny_config.name, "set": steps, "seeds": [1, 2], "runs": {"pre": {}}}))
    assert main(["compare", "--experiment", str(pretrain), "--out", str(tmp_path / "pre")]) == 0
    runs = {"ft": {"training.init_from": str(tmp_path / "pre" / "pre" / "seed{seed}")}}
    finetune.write_text(yaml.safe_dump({"base": tiny_config.name, "set": steps, "seeds": [1, 2], "runs": runs}))
    assert main(["compare", "--experiment", str(finetune), "--out", str(tmp_path / "ft")]) == 0
    for seed in (1, 2):
        saved = (tmp_path / "ft" / "ft" / f"seed{seed}" / "config.yaml").read_text()
        assert f"seed{seed}" in saved and "{seed}" not in saved
    capsys.readouterr()


def test_compare_needs_configs_or_an_experiment(capsys, tmp_path):
    assert main(["compare", "--out", str(tmp_path)]) == 2
    assert "give either run configs or --experiment" in capsys.readouterr().err


def test_a_signal_stops_the_whole_experiment_and_the_same_command_continues_it(tmp_path, tiny_config):
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(
        yaml.safe_dump(
            {
                "base": tiny_config.name,
                "set": {"training.steps": 40, "evaluation.interval": 20},
                "runs": {"first": {}, "second": {"model.n_kv_heads": 4}},
            }
        )
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "encdec", "compare", "--experiment", str(experiment), "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "first" / "metrics.jsonl"
    deadline = time.time() + 300  # a hang detector, not a speed test: the loop ends at the third record
    while time.time() < deadline and not (metrics.exists() and len(read_metrics(metrics)) >= 3):
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=300)  # a hang detector: the run saves and exits in seconds
    assert process.returncode == 2 and "stopped during run" in err and "Traceback" not in err
    assert not (out / "second").exists()  # the runs after the stopped one were not started
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    steps = [r["step"] for r in read_metrics(metrics) if r["kind"] == "train"]
    assert steps == list(range(1, 41))  # resumed where the signal stopped it: no step twice, none missing


def test_a_member_whose_config_changed_is_set_aside_and_trained_again(capsys, tmp_path, tiny_config):
    experiment = tmp_path / "experiment.yaml"

    def write(lr):
        experiment.write_text(
            yaml.safe_dump(
                {
                    "base": tiny_config.name,
                    "set": {"training.steps": 2, "evaluation.interval": 2, "optimizer.lr": lr},
                    "runs": {"only": {}},
                }
            )
        )

    out = tmp_path / "out"
    write(2e-3)
    assert main(["compare", "--experiment", str(experiment), "--out", str(out)]) == 0
    first = read_metrics(out / "only" / "metrics.jsonl")
    write(1e-3)  # the experiment now asks for another lr: the old member is not reused
    assert main(["compare", "--experiment", str(experiment), "--out", str(out)]) == 0
    assert read_metrics(out / "only.stale-1" / "metrics.jsonl") == first  # moved aside, not deleted
    assert yaml.safe_load((out / "only" / "config.yaml").read_text())["optimizer"]["lr"] == 1e-3
    assert read_metrics(out / "only" / "metrics.jsonl") != first


def test_the_plot_of_several_seeds_draws_their_mean_and_band(tmp_path):
    from encdec.training.metrics import across_seeds, plot_curves

    seeds = [
        [{"kind": "eval", "step": s, "train_loss": 3.0 - s + d, "val_loss": 3.5 - s + d} for s in (1, 2)]
        for d in (0.0, 0.2, 0.4)
    ]
    steps, mean, low, high = across_seeds(seeds, "eval", "val_loss")
    assert steps == [1, 2] and mean == pytest.approx([2.7, 1.7]) and low == [2.5, 1.5] and high == [2.9, 1.9]
    assert plot_curves({"run": seeds}, tmp_path / "curves.png").stat().st_size > 10_000


def test_curves_gain_a_panel_for_the_generated_metric_and_one_for_the_gradient_norm(tmp_path):
    from encdec.training.metrics import extra_panels, plot_curves

    train = [{"kind": "train", "step": s, "loss": 5.0 - 0.1 * s, "grad_norm": 1.0} for s in (1, 2)]
    evals = [{"kind": "eval", "step": 2, "train_loss": 4.8, "val_loss": 4.9, "val_bleu": 3.0, "val_rougeL": 9.0}]
    assert extra_panels({"run": [train + evals]}) == [("eval", "val_rougeL"), ("train", "grad_norm")]
    assert extra_panels({"run": [[{"kind": "train", "step": 1, "loss": 1.0}]]}) == []
    assert plot_curves({"run": train + evals}, tmp_path / "curves.png").stat().st_size > 10_000
