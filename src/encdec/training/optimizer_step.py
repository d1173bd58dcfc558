"""One optimizer step of the training loop: gradient-accumulated micro-batches, the loss averaged over every
target token of the global batch (and a teacher's distillation KL beside it), the clip and the update, with
nothing that waits for the device; and the step's matmul FLOPs, for the logged MFU."""

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import torch
from torch import nn

from encdec.data.batch import Batch
from encdec.models import ModelConfig
from encdec.models.encoder_decoder import packing_of
from encdec.models.loss import CHUNK_LOGITS, Loss, chunked_loss, compute_loss, distilled
from encdec.models.outputs import Seq2SeqOutput
from encdec.training import distributed
from encdec.training.distill import Teacher
from encdec.training.flops import step_flops
from encdec.training.loader import LoadedBatch, forward
from encdec.training.run_config import RunConfig

BLOCKS = 8  # a loss is made by blocks (chunked_loss) where its whole logits would fill more than these


def batches_flops(model_cfg: ModelConfig, batches: list[LoadedBatch]) -> float | None:
    """This process's matmul FLOPs for one optimizer step over `batches` (host shapes: no sync), where the
    family's count is known (the encoder-decoder's), else None."""
    if model_cfg.family != "encoder_decoder":
        return None
    flops = 0.0
    for loaded in batches:
        (rows, src_len), tgt_len = loaded.batch.src_ids.shape, loaded.batch.tgt_ids.shape[1]
        flops += step_flops(model_cfg, rows, src_len, tgt_len)
    return flops


def step_loss(
    model: nn.Module,
    batch: Batch,
    model_cfg: ModelConfig,
    label_smoothing: float,
    amp: AbstractContextManager,
    chunk: int | None = CHUNK_LOGITS,
) -> tuple[Loss, Seq2SeqOutput]:
    """Forward and loss of one micro-batch on its device: what optimizer_step differentiates, and the unit
    training.compile traces whole (no graph break, no host read: tests/training/test_compiled_training_step.py).
    Where the batch's logits would fill more than BLOCKS blocks of `chunk` numbers (1 GiB of fp32 logits by
    default: a vocabulary of 256k, not t5-base's 32k at batch 32) and the model gives its hidden states apart
    (an encoder-decoder or the decoder-only baseline, not under DDP / FSDP), they are made a block at a time
    (chunked_loss; the output's logits None): less memory, more time (docs/benchmarks.md); else the forward
    under `amp` and the loss in fp32 outside it. `chunk` None: always whole (a teacher reads them)."""
    wide = chunk is not None and batch.labels.numel() * model_cfg.vocab_size > BLOCKS * chunk
    if wide and hasattr(model, "features"):
        with amp:
            packing = packing_of(**batch.packing)
            hidden, aux = model.features(batch.src_ids, batch.tgt_ids, batch.src_mask, packing)
            head = model.linear_head() or model.head  # one product: its gradients formed as the logits are
            loss = chunked_loss(hidden, head, batch.labels, aux, model_cfg, label_smoothing, chunk)
        return loss, Seq2SeqOutput(None, aux_losses=aux)
    with amp:
        out = forward(model, batch)
    return compute_loss(out.logits, batch.labels, out.aux_losses, model_cfg, label_smoothing), out


def optimizer_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: list[LoadedBatch],
    cfg: RunConfig,
    model_cfg: ModelConfig,
    info: distributed.DistInfo,
    amp: AbstractContextManager,
    scaler: torch.amp.GradScaler | None = None,
    teacher: Teacher | None = None,
    held: Sequence[nn.Parameter] = (),
    loss_of: Callable = step_loss,
):
    """One optimizer step over `grad_accum` global batches -> (CE sum over the batch's tokens, on the
    device; aux losses, on the device; loss tokens, a host int). Nothing here waits for the device.
    The `held` parameters' gradients are dropped before the clip: the optimizer neither moves nor decays them.
    `loss_of` is step_loss, or step_loss compiled (training.compile).

    The loss is averaged over every target token of the global batch, whichever
    process and micro-batch holds it, so W processes match one exactly; so is a teacher's
    distillation KL (training.distill), logged as `distill_kl` beside the CE's `loss`.
    """
    accum, smoothing = len(batches), cfg.training.label_smoothing
    n_tokens = sum(b.global_tokens for b in batches)
    ce_sum, kl_sum = torch.zeros((), device=info.device), torch.zeros((), device=info.device)
    aux_sums: dict[str, torch.Tensor | float] = {}
    for i, loaded in enumerate(batches):
        local = loaded.to(info.device)
        with distributed.gradient_sync(model, enabled=i == accum - 1):
            losses, out = loss_of(
                model, local, model_cfg, smoothing, amp, None if teacher is not None else CHUNK_LOGITS
            )
            if teacher is not None:  # the frozen teacher's logits on the same rows
                taught = teacher.logits(local, amp)
                losses = distilled(losses, out.logits, taught, local.labels, teacher.alpha, teacher.temperature)
                kl_sum += losses.distill_kl * loaded.num_tokens
            share = loaded.num_tokens / max(n_tokens, 1) * info.world_size
            loss = losses.objective * share + losses.aux / accum
            (scaler.scale(loss) if scaler is not None else loss).backward()
        ce_sum += losses.ce.detach() * loaded.num_tokens
        for name, value in out.aux_losses.items():
            aux_sums[name] = aux_sums.get(name, 0.0) + value.detach().float() / accum
    if batches[0].positions:  # the share of computed positions holding real tokens (objective.pack raises it)
        filled = sum(b.filled for b in batches) / sum(b.positions for b in batches)
        aux_sums["fill"] = filled  # a host number, logged as it is: no copy to the device
    for parameter in held:  # training.cross_attention_warmup: the copied weights wait for the fresh ones
        parameter.grad = None
    if scaler is not None:
        scaler.unscale_(optimizer)  # true gradients for the norm and the clip
    if cfg.training.clip_norm > 0:  # the norm before clipping, logged as grad_norm
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.clip_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    aux_sums["grad_norm"] = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: a DTensor
    if scaler is not None:
        scaler.step(optimizer)  # skipped when the gradients overflowed; the scale then shrinks
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if teacher is None:
        return distributed.all_reduce_sum(ce_sum, info), aux_sums, n_tokens
    ce_sum, kl_sum = distributed.all_reduce_sum(torch.stack([ce_sum, kl_sum]), info)  # one collective for both
    aux_sums["distill_kl"] = kl_sum / max(n_tokens, 1)
    return ce_sum, aux_sums, n_tokens
