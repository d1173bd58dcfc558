"""The loop's evaluation: the mean cross-entropy of fixed batches of each split (and of each mixture member), and
which checkpoint becomes the best by it."""

from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from encdec.evaluation.text_metrics import ERROR_RATES
from encdec.models.loss import cross_entropy
from encdec.training import distributed
from encdec.training.loader import forward, local_rows
from encdec.training.run_config import RunConfig
from encdec.training.run_data import RunData


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: RunData,
    cfg: RunConfig,
    info: distributed.DistInfo,
    amp: AbstractContextManager = nullcontext(),
    splits: tuple[str, ...] = ("train", "val"),
) -> dict:
    """Mean cross-entropy over `evaluation.steps` batches of each of `splits` (train and validation), and
    for a mixture each member's own (`val_loss/NAME`) beside the mixture's.

    The evaluation batches are drawn by freshly seeded objectives, so every
    evaluation sees the same batches and training's RNG is not disturbed.
    """
    model.eval()
    rows = distributed.rows_for_rank(cfg.training.batch_size, info) if info.enabled else None
    result = {}
    sources = {"": data.eval_objective} | {f"/{name}": make for name, make in data.member_eval.items()}
    for split in splits:
        for suffix, make in sources.items():
            result[f"{split}_loss{suffix}"] = mean_loss(model, make(split), cfg.evaluation.steps, rows, info, amp)
    model.train()
    return result


def mean_loss(model, objective, steps: int, rows, info: distributed.DistInfo, amp: AbstractContextManager) -> float:
    """The token-weighted mean cross-entropy of `steps` batches of `objective`, over every process."""
    ce_sum, tokens = torch.zeros((), device=info.device), 0
    for _ in range(steps):
        loaded = local_rows(objective.next_batch(), rows)
        local = loaded.to(info.device)
        with amp:
            out = forward(model, local)
        ce_sum += cross_entropy(out.logits, local.labels) * loaded.num_tokens
        tokens += loaded.num_tokens
    total = torch.stack([ce_sum, torch.tensor(float(tokens), device=info.device)])  # (CE * tokens, tokens)
    total = distributed.all_reduce_sum(total, info)
    return (total[0] / total[1]).item()  # 0 / 0 is nan: no tokens to score


def best_by_score(last_eval: dict, cfg: RunConfig) -> float:
    """The number the best checkpoint minimises: the validation loss, or the generation metric (minus it where
    higher is better)."""
    if cfg.output.best_by == "metric":
        metric = cfg.evaluation.metric
        return (1 if metric in ERROR_RATES else -1) * last_eval[f"val_{metric}"]
    return last_eval["val_loss"]


def compare_to_best(score: float | None, best: float | None) -> tuple[bool, bool]:
    """(the new checkpoint becomes `best`, it improved on the best score): on a tie the later checkpoint,
    trained longer, becomes best, without counting as an improvement for early stopping."""
    if score is None:
        return False, False
    if best is None:
        return True, True
    return score <= best, score < best
