"""benchmarks/bench_train.py at toy sizes on the CPU: its FLOP count, its data layout, its reading of
the trainer's records, and one end-to-end run."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from model_kit import UNEVEN_T5
from torch.utils.flop_counter import FlopCounterMode

import encdec
from encdec.data.objectives.ul2 import UL2Config, denoise
from encdec.models import preset

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_train.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("activation", ["relu", "gated_gelu"])
def test_step_flops_equals_the_counted_matmuls_of_a_step(bench, activation):
    cfg = preset("t5-tiny", **UNEVEN_T5, activation=activation)  # each term must use the right width and depth
    model = encdec.build_model(cfg).train()
    generator = torch.Generator().manual_seed(0)
    src, mask, tgt, labels = bench.random_batch(cfg, 2, 10, 6, generator, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter:
        model(src, tgt, src_mask=mask, labels=labels).loss.backward()
    assert bench.step_flops(cfg, 2, 10, 6) == counter.get_total_flops()


@pytest.mark.parametrize(("src_len", "tgt_len"), [(512, 128), (256, 64), (16, 8), (100, 3)])
def test_span_layout_gives_exactly_the_bare_step_lengths(bench, src_len, tgt_len):
    length, density, mean_span = bench.span_layout(src_len, tgt_len)
    config = UL2Config.span_corruption(mean_span, density, max_length=length)
    tokens = np.arange(1000, 1000 + length)
    for seed in range(5):
        inputs, targets = denoise(tokens, "R", config, np.arange(100), np.random.default_rng(seed))
        assert (len(inputs), len(targets) + 1) == (src_len, tgt_len)  # the objective appends EOS


def test_trainer_rate_reads_cumulative_records_and_falls_back_to_per_step_rates(bench):
    records = [{"kind": "train", "step": s, "tokens": 100 * s, "elapsed": 1.0 + 0.5 * s} for s in range(1, 6)]
    records.insert(3, {"kind": "eval", "step": 3, "val_loss": 1.0})
    assert bench.trainer_tokens_per_s(records, warmup=2) == (200.0, "tokens / elapsed")
    older = [{"kind": "train", "step": s, "tokens_per_s": rate} for s, rate in enumerate([1.0, 100.0, 300.0], 1)]
    rate, how = bench.trainer_tokens_per_s(older, warmup=1)
    assert rate == pytest.approx(150.0) and how == "per-step tokens_per_s"


@pytest.mark.slow
def test_main_runs_both_models_and_the_trainer_for_one_step(bench, shared_data, capsys):
    bench.main(
        [
            "--device",
            "cpu",
            "--shapes",
            "t5-tiny",
            "--batch",
            "2",
            "--src-len",
            "16",
            "--tgt-len",
            "8",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--threads",
            "1",
            "--peak-tflops",
            "1",
            "--data-dir",
            str(shared_data),
        ]
    )
    out = capsys.readouterr().out
    assert "encdec/HF speed" in out
    assert "trainer end-to-end:" in out and "% of the bare step" in out


def test_the_step_profile_names_each_implementations_matmuls(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("profile_train_step", SCRIPT.parent / "profile_train_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(
        [
            "--device",
            "cpu",
            "--batch",
            "1",
            "--src-len",
            "16",
            "--tgt-len",
            "8",
            "--warmup",
            "0",
            "--steps",
            "1",
            "--rows",
            "40",
        ]
    )
    out = capsys.readouterr().out
    encdec_table, hf_table = out.split("== encdec")[1].split("== hf")
    for table in (encdec_table, hf_table):  # each implementation's own operators, its matmuls among them
        assert "aten::mm" in table and "Self CPU time total" in table
