"""MFU in metrics.jsonl: the step's FLOPs as torch's counter counts them, over time and the device's peak."""

import pytest
import torch
from model_kit import UNEVEN_T5
from torch.utils.flop_counter import FlopCounterMode

import encdec
from encdec.cli import main
from encdec.models import preset
from encdec.training.flops import step_flops, training_peak_tflops
from encdec.training.metrics import read_metrics


def counted_step_flops(cfg, batch: int, src_len: int, tgt_len: int) -> int:
    torch.manual_seed(0)
    model = encdec.build_model(cfg).train()
    src = torch.randint(2, cfg.vocab_size, (batch, src_len))
    tgt, labels = torch.randint(2, cfg.vocab_size, (batch, tgt_len)), torch.randint(2, cfg.vocab_size, (batch, tgt_len))
    mask = torch.ones(batch, src_len, dtype=torch.bool)  # as the trainer's batches come
    with FlopCounterMode(display=False) as counter:
        model(src, tgt, src_mask=mask, labels=labels).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(
    "overrides",
    [
        {"activation": "relu"},
        {"activation": "gated_gelu", "n_kv_heads": 2},
        {"n_experts": 4},
        {"n_experts": 4, "moe_top_k": 2},
        # an encoder of its own widths (T5Gemma's unbalanced): its layers at its widths, cross k and v from them
        {
            "encoder_d_model": 40,
            "encoder_n_heads": 2,
            "encoder_d_head": 16,
            "encoder_d_ff": 80,
            "shared_embeddings": False,
        },
    ],
)
def test_step_flops_equals_the_counted_matmuls_of_a_step(overrides):
    cfg = preset("t5-tiny", **UNEVEN_T5, **overrides)  # each term must use the right width and depth
    assert step_flops(cfg, 2, 10, 6) == counted_step_flops(cfg, 2, 10, 6)


def test_the_peak_is_the_users_or_the_data_sheets_and_none_on_a_cpu():
    cpu = torch.device("cpu")
    assert training_peak_tflops(cpu, "fp32", None) is None
    assert training_peak_tflops(cpu, "fp32", 0.25) == 0.25


def test_training_logs_mfu_against_the_given_peak(tmp_path, tiny_config):
    overrides = ["training.steps=4", "output.log_interval=2", "training.peak_tflops=0.25"]
    assert (
        main(["train", str(tiny_config), "--out", str(tmp_path / "run"), *(a for o in overrides for a in ("--set", o))])
        == 0
    )
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert all(0 < r["mfu"] < 1 for r in records)
    assert len({r["mfu"] for r in records}) > 1  # one figure per interval


def test_without_a_known_peak_no_mfu_is_logged(tmp_path, tiny_config):
    assert main(["train", str(tiny_config), "--out", str(tmp_path / "run"), "--set", "training.steps=2"]) == 0
    assert all("mfu" not in r for r in read_metrics(tmp_path / "run" / "metrics.jsonl"))
