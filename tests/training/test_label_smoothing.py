"""training.label_smoothing: the optimised loss mixes the target with a uniform distribution; the logged
loss stays the plain cross-entropy."""

import torch
import torch.nn.functional as F

from encdec.cli import main
from encdec.models.loss import cross_entropy
from encdec.training.metrics import read_metrics

FAST = ["training.steps=3", "evaluation.interval=3", "model.dropout=0.0", "schedule.kind=constant"]


def losses(tiny_config, run, *overrides):
    args = ["train", str(tiny_config), "--out", str(run), *(a for o in [*FAST, *overrides] for a in ("--set", o))]
    assert main(args) == 0
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


def test_smoothed_cross_entropy_is_the_mix_of_the_target_and_a_uniform_distribution():
    logits, labels = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    labels[1, 3:] = -100  # no loss there
    keep = labels.flatten() != -100
    logp = logits.flatten(0, 1)[keep].log_softmax(-1)
    nll = -logp.gather(1, labels.flatten()[keep, None]).squeeze(1)
    expected = (0.9 * nll - 0.1 * logp.mean(-1)).mean()  # (1 - e) * NLL + e * mean over the vocabulary of -log p
    torch.testing.assert_close(cross_entropy(logits, labels, 0.1), expected)
    torch.testing.assert_close(
        cross_entropy(logits, labels, 0.0), F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    )


def test_label_smoothing_changes_the_updates_but_not_what_is_logged(tmp_path, tiny_config):
    plain = losses(tiny_config, tmp_path / "plain")
    smoothed = losses(tiny_config, tmp_path / "smoothed", "training.label_smoothing=0.1")
    assert smoothed[0] == plain[0]  # the first step's logged loss: the same model, the plain cross-entropy
    assert smoothed[1] != plain[1]  # after one update with another loss, another model
