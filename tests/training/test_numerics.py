"""Precision, determinism, RNG states and process placement: what a run sets, saves and refuses."""

from contextlib import nullcontext

import pytest
import torch
from torch import nn

from encdec.errors import ConfigError
from encdec.models import ModelConfig
from encdec.runs.checkpoint import load_checkpoint
from encdec.runs.run_dir import RunDir
from encdec.training import distributed, load_config, train
from encdec.training.loader import LoadedBatch
from encdec.training.numerics import numerics, resolve_precision
from encdec.training.optimizer_step import optimizer_step


def test_auto_precision_is_fp32_on_a_cpu_without_native_bf16_and_explicit_choices_stand():
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == "fp32"  # the suite runs as without AMX and AVX-512 BF16 (conftest)
    assert resolve_precision("bf16", cpu) == "bf16" and resolve_precision("fp32", cpu) == "fp32"


@pytest.mark.parametrize(
    "amx, dots, limit, expected",
    [
        (True, True, "", "bf16"),
        (True, True, "ALL", "bf16"),
        (True, True, "avx512_core_bf16", "bf16"),  # AMX limited away, AVX-512 BF16's dot products kept
        (True, True, "avx512_core_vnni", "fp32"),
        (False, True, "", "bf16"),  # an AMD EPYC (Zen 4): AVX-512 BF16 without AMX
        (False, True, "AVX2", "fp32"),
        (False, False, "", "fp32"),
    ],
)
def test_auto_precision_is_bf16_on_a_cpu_that_multiplies_it_natively(amx, dots, limit, expected, monkeypatch):
    """AMX's bf16 products run about 6x fp32's and AVX-512 BF16's about 2x on an AMD EPYC, so auto picks bf16 on
    either; oneDNN limited to an instruction set without them (ONEDNN_MAX_CPU_ISA, as the suite runs) computes as a
    CPU without them, and so does auto."""
    from encdec import cpu_features

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: dots)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", limit)
    cpu_features.cpu_features.cache_clear()
    try:
        assert resolve_precision("auto", torch.device("cpu")) == expected
        features = cpu_features.cpu_features()
        described = features.describe()
        assert described.startswith(features.model)
        assert ("no AMX" in described) == (not amx or limit.upper() in cpu_features.AMX_FREE_LIMITS)
        assert features.native_bf16 == (expected == "bf16")
    finally:
        cpu_features.cpu_features.cache_clear()


@pytest.mark.cuda
def test_auto_precision_is_bf16_on_a_gpu_that_supports_it():
    assert resolve_precision("auto", torch.device("cuda")) == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")


def test_a_run_leaves_torchs_global_settings_as_it_found_them(device):
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32)
    with numerics(device, deterministic=True):
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cuda.matmul.allow_tf32 == (device.type == "cuda" or before[1])
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32) == before


def test_deterministic_runs_repeat_bitwise_and_checkpoints_hold_this_devices_rng(tmp_path, tiny_config, device):
    overrides = ["training.steps=4", "output.save_interval=2", "training.deterministic=true"]
    runs = [tmp_path / "a", tmp_path / "b"]
    results = [train(load_config(tiny_config, overrides), run) for run in runs]
    losses = [[r["loss"] for r in result.history if r["kind"] == "train"] for result in results]
    assert len(losses[0]) == 4 and losses[0] == losses[1]
    rng = load_checkpoint(RunDir(runs[0]).latest())["rng"]
    assert "torch" in rng and ("cuda_rank0" in rng) == (device.type == "cuda")


def test_torchrun_with_more_processes_than_gpus_is_refused_in_one_sentence(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match="started 2 processes on this machine but it has 1 GPU"):
        distributed.setup("cuda")


class FakeFSDP(nn.Module):
    """Records, at each backward, whether gradient synchronisation was on (FSDP2 reads the flag there)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.sync, self.seen = True, []
        self.weight.register_hook(lambda grad: self.seen.append(self.sync) or grad)

    def set_requires_gradient_sync(self, enabled: bool) -> None:
        self.sync = enabled

    def forward(self, src_ids, tgt_ids, src_mask=None, labels=None):
        logits = (self.weight * tgt_ids.float().mean()).expand(*tgt_ids.shape, 3)  # (B, T, 3)
        return type("Out", (), {"logits": logits, "aux_losses": {}})()


def test_accumulation_synchronises_gradients_only_in_the_last_backward(tiny_config):
    from encdec.data.batch import Batch

    model = FakeFSDP()
    batch = Batch(tgt_ids=torch.ones(2, 3, dtype=torch.long), labels=torch.ones(2, 3, dtype=torch.long))
    loaded = [LoadedBatch(batch, 6, 6) for _ in range(3)]
    cfg = load_config(tiny_config, ["training.grad_accum=3"])
    optimizer_step(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loaded,
        cfg,
        ModelConfig(),
        distributed.DistInfo(),
        nullcontext(),
    )
    assert model.seen == [False, False, True]


@pytest.mark.slow
@pytest.mark.cuda
def test_a_compiled_model_trains_to_the_eager_losses_on_a_gpu(tmp_path, tiny_config):
    overrides = ["training.steps=6", "training.device=cuda", "model.dropout=0.0", "training.precision=bf16"]
    results = [
        train(load_config(tiny_config, [*overrides, f"training.compile={c}"]), tmp_path / c) for c in ("false", "true")
    ]
    eager, compiled = ([r["loss"] for r in res.history if r["kind"] == "train"] for res in results)
    assert max(abs(a - b) for a, b in zip(eager, compiled, strict=True)) < 2e-2  # bf16: kernels fuse differently


def test_fp16_is_refused_on_a_cpu_and_with_fsdp():
    with pytest.raises(ConfigError, match="training.precision fp16 needs a CUDA GPU"):
        resolve_precision("fp16", torch.device("cpu"))
    if torch.cuda.is_available():
        with pytest.raises(ConfigError, match="not supported with FSDP"):
            resolve_precision("fp16", torch.device("cuda"), "fsdp")


@pytest.mark.cuda
def test_fp16_with_loss_scaling_trains_and_resumes_with_its_scale(tmp_path, tiny_config):
    """On a GPU: fp16 autocast, the GradScaler's state in the checkpoint, losses that fall and stay finite."""
    import math

    from encdec.training.metrics import read_metrics

    overrides = [
        "training.precision=fp16",
        "training.device=cuda",
        "training.steps=8",
        "output.save_interval=4",
        "evaluation.interval=4",
    ]
    run = tmp_path / "run"
    train(load_config(tiny_config, overrides), run)
    state = load_checkpoint(RunDir(run).latest())["state"]
    assert state["scaler"]["scale"] > 0
    train(load_config(tiny_config, [*overrides, "training.steps=12"]), run, resume=True)
    losses = [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    assert len(losses) == 12 and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
