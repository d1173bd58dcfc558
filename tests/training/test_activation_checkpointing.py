"""training.activation_checkpointing: the same losses and weights, fewer activations kept for backward."""

import pytest
import torch

from encdec.cli import main
from encdec.models import build_model, preset
from encdec.runs.load import load_run
from encdec.training.metrics import read_metrics
from encdec.training.numerics import checkpoint_activations

FAST = ["training.steps=4", "evaluation.interval=4", "schedule.kind=constant"]  # dropout on: masks must repeat


def train(tiny_config, run, *overrides):
    args = ["train", str(tiny_config), "--out", str(run), *(a for o in [*FAST, *overrides] for a in ("--set", o))]
    assert main(args) == 0
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


def test_checkpointed_training_gives_the_same_losses_and_weights(tmp_path, tiny_config):
    plain = train(tiny_config, tmp_path / "plain")
    checkpointed = train(tiny_config, tmp_path / "checkpointed", "training.activation_checkpointing=true")
    assert checkpointed == pytest.approx(plain, abs=1e-5)
    a, b = load_run(tmp_path / "plain", "latest").model, load_run(tmp_path / "checkpointed", "latest").model
    assert a.state_dict().keys() == b.state_dict().keys()  # parameter names unchanged: checkpoints interchange
    for name, tensor in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[name], tensor, atol=1e-5, rtol=1e-4)


def saved_bytes(model, src, tgt, labels) -> int:
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(src, tgt, labels=labels).loss.backward()
    return total


def test_checkpointing_keeps_far_fewer_activations_for_backward():
    torch.manual_seed(0)
    cfg = preset("t5-tiny", vocab_size=64, n_encoder_layers=4, dropout=0.0)
    plain, wrapped = build_model(cfg).train(), build_model(cfg).train()
    wrapped.load_state_dict(plain.state_dict())
    assert checkpoint_activations(wrapped) == 4 + 4
    src, tgt = torch.randint(2, 64, (4, 48)), torch.randint(2, 64, (4, 24))
    kept_plain, kept_wrapped = saved_bytes(plain, src, tgt, tgt), saved_bytes(wrapped, src, tgt, tgt)
    assert kept_wrapped < kept_plain / 2
    for p, q in zip(plain.parameters(), wrapped.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad)


def test_a_model_without_blocks_is_refused(tmp_path, tiny_config, capsys):
    args = [
        "train",
        str(tiny_config),
        "--out",
        str(tmp_path / "run"),
        "--set",
        "model={preset: rnn_seq2seq-tiny}",
        "--set",
        "training.activation_checkpointing=true",
        "--set",
        "objective.kind=span_corruption",  # an objective the RNN reads (causal_lm is refused first, for any seq2seq)
    ]
    code = main(args)
    assert code == 2 and "no transformer blocks to checkpoint" in capsys.readouterr().err
