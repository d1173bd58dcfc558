"""What encdec compare reads back from its members (summary.json, metrics.jsonl), whatever they hold: the member
is reused, or trained again as promised (resumed from its checkpoint: the same figures, its summary written
anew), or the experiment is refused in one sentence; never a traceback."""

import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml
from bad_inputs_kit import TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encdec.cli import main
from encdec.errors import EncdecError
from encdec.schema import load_json, read
from encdec.training.experiments import SummaryFile, _finished, markdown_table, summarise
from encdec.training.metrics import plot_curves, read_metrics

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    """Made once: an experiment of one member trained to its end (its table in out/results.json)."""
    root = tmp_path_factory.mktemp("compare")
    (root / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    assert main(["compare", str(root / "tiny.yaml"), "--out", str(root / "out")]) == 0
    return root


def copy_of(experiment: Path, place: Path) -> Path:
    shutil.copy(experiment / "tiny.yaml", place / "tiny.yaml")
    shutil.copytree(experiment / "out", place / "out")
    return place


def figures(out: Path) -> list:
    """What the table says of each member, beside its timings (a resumed run adds to its wall time)."""
    rows = json.loads((out / "results.json").read_text())
    return [
        [r[k] for k in ("run", "train_loss", "val_loss", "parameters", "parameters_without_positions")] for r in rows
    ]


def written(summary: dict) -> str:
    return json.dumps(summary)


GOOD = {
    "steps": 2,
    "train_loss": 5.6,
    "val_loss": 5.7,
    "parameters": 44160,
    "parameters_without_positions": 44160,
    "wall_time": 0.5,
    "tokens_per_s": 360.0,
}
DAMAGED = {  # summary.json's text
    "truncated": written(GOOD)[:30],
    "empty": "",
    "not UTF-8": "\udcff",
    "not a mapping": "[]",
    "a key missing": written({k: v for k, v in GOOD.items() if k != "val_loss"}),
    "a wrong type": written({**GOOD, "steps": "2"}),
    "a huge number": written({**GOOD, "wall_time": 10**400}),
    "a loss past any run's": written({**GOOD, "val_loss": 1e300}),
    "NaN": written(GOOD).replace("5.7", "NaN"),
    "an interrupted run's": written({**GOOD, "interrupted": True, "signal": 2}),
}


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_damaged_summary_trains_its_member_again_to_the_same_figures(damage, experiment, tmp_path, caplog):
    place = copy_of(experiment, tmp_path)
    summary = place / "out" / "tiny" / "summary.json"
    summary.write_bytes(DAMAGED[damage].encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.WARNING):
        assert main(["compare", str(place / "tiny.yaml"), "--out", str(place / "out")]) == 0
    assert "is damaged" in caplog.text and "training that member again" in caplog.text
    assert figures(place / "out") == figures(experiment / "out")
    read(SummaryFile, load_json(summary, "run summary"))  # written anew


@pytest.mark.parametrize("part", ["summary.json", "metrics.jsonl"])
def test_a_directory_where_a_member_writes_is_refused_in_one_sentence_before_training(
    part, experiment, tmp_path, capsys
):
    place = copy_of(experiment, tmp_path)
    target = place / "out" / "tiny" / part
    target.unlink()
    target.mkdir()
    capsys.readouterr()
    assert main(["compare", str(place / "tiny.yaml"), "--out", str(place / "out")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("encdec: error: ") and f"{part} is not a file" in lines[0], lines


def test_a_summary_of_a_run_stopped_early_is_reused_however_few_its_steps(tmp_path):
    (tmp_path / "summary.json").write_text(written({**GOOD, "steps": 1, "early_stopped": True}))
    (tmp_path / "metrics.jsonl").write_text("")
    assert _finished(tmp_path, steps=100).val_loss == 5.7
    (tmp_path / "summary.json").write_text(written({**GOOD, "steps": 1}))
    assert _finished(tmp_path, steps=100) is None  # a shorter run: resumed to the steps asked


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(-(10**400), 10**400),
        st.floats(),
        st.sampled_from([1e308, -1e308, 3.4e38, 1e-320]),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)


def summaries() -> st.SearchStrategy:
    """GOOD with any of its fields (or one more) given any value or dropped, or any JSON value at all."""
    fields = [*GOOD, "interrupted", "early_stopped", "signal", "is_main", "unknown"]
    changed = st.dictionaries(st.sampled_from(fields), st.one_of(json_values, st.just(...)), max_size=4)
    mutated = changed.map(lambda c: {k: v for k, v in {**GOOD, **c}.items() if v is not ...})
    return st.one_of(mutated, json_values)


def ends_well(read_it):
    """`read_it()` returns or raises one EncdecError sentence, nothing else."""
    try:
        return read_it()
    except EncdecError as error:
        assert "\n" not in str(error) and len(str(error)) < 300, str(error)
        return None


@FUZZ
@given(summary=summaries(), cut=st.integers(0, 400))
def test_any_summary_is_reused_or_its_member_trained_again(summary, cut, tmp_path_factory):
    """Reused, the member's row and the table are made (two seeds of it: a mean and a spread); else None, which
    resumes it. A summary whose text is cut short is damaged too."""
    run = tmp_path_factory.mktemp("run")
    text = json.dumps(summary)  # Python's JSON: NaN, Infinity and integers of any size, as a damaged file has them
    (run / "summary.json").write_text(text[:cut] if cut < len(text) else text)
    (run / "metrics.jsonl").write_text("")
    result = ends_well(lambda: _finished(run, steps=2))
    if result is not None:
        row = summarise("tiny", [result, result])
        assert markdown_table([row]).count("\n") == 3
        json.dumps({**row, "run_dir": str(row["run_dir"]), "run_dirs": []})


records = st.one_of(
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["train", "eval"]), "step": st.integers(0, 4)},
        optional={name: json_values for name in ("loss", "val_loss", "train_loss", "distill_kl", "grad_norm")},
    ),
    json_values,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(records.map(json.dumps), st.text(max_size=20)), max_size=8))
def test_any_metrics_log_of_a_reused_member_is_tabulated_and_drawn(lines, tmp_path_factory):
    """Its records as read back (a damaged line left out) make the table's distillation column and the plot."""
    run = tmp_path_factory.mktemp("run")
    (run / "summary.json").write_text(written(GOOD))
    (run / "metrics.jsonl").write_text("\n".join(lines))
    result = _finished(run, steps=2)
    row = summarise("tiny", [result])
    markdown_table([row])
    plot_curves({"tiny": [read_metrics(run / "metrics.jsonl")] * 2}, run / "curves.png")
