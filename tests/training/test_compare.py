import json

import yaml

from encdec.cli import main


def test_compare_trains_each_run_and_prints_the_seeds_table(capsys, tmp_path, tiny_config):
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(yaml.safe_dump({
        "base": tiny_config.name,
        "set": {"training.steps": 3, "evaluation.interval": 3, "output.save_interval": 3},
        "seeds": [1, 2],
        "runs": {"t5": {"model.preset": "t5-tiny"}, "rot5": {}},
    }, sort_keys=False))  # fmt: skip
    out = tmp_path / "out"
    assert main(["compare", "--experiment", str(experiment), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| run | train loss | val loss | params | params w/o pos | wall time (s) | tokens/s |" in table
    assert table.count(" ± ") == 4  # two runs, two seeds: mean ± spread of train and val loss
    rows = json.loads((out / "results.json").read_text())
    assert [r["run"] for r in rows] == ["t5", "rot5"]
    assert rows[0]["parameters"] != rows[1]["parameters"]
    assert (out / "curves.png").stat().st_size > 10_000

    metrics = out / "t5" / "seed1" / "metrics.jsonl"
    before = metrics.stat().st_mtime_ns
    assert main(["compare", "--experiment", str(experiment), "--out", str(out)]) == 0  # finished runs are reused
    assert metrics.stat().st_mtime_ns == before
    assert capsys.readouterr().out == table


def test_compare_needs_configs_or_an_experiment(capsys, tmp_path):
    assert main(["compare", "--out", str(tmp_path)]) == 2
    assert "give either run configs or --experiment" in capsys.readouterr().err
