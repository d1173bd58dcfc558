"""The loss of every family, in one place: the network returns logits and its auxiliary terms
unweighted (Seq2SeqOutput.aux_losses), and this module weighs them, as t5x keeps the loss
outside the network.

    loss = CE(logits, labels; label_smoothing) + sum over aux terms  weight[name] * aux[name]

The weights are declared once, by term name (`loss_weights`): the mixture-of-experts terms of
each side (SEEDS.md section 2), the embedding loss of seed 000 and the encoder loss of seed 001
(SEEDS.md sections 3 and 4). The reported cross-entropy is always the plain one, whatever the
smoothing, so validation losses compare across runs.

With a teacher (training.distill), the cross-entropy term is mixed with logit distillation
(Hinton et al. 2015, section 2), both averaged over the same labelled target tokens:

    loss = (1 - alpha) * CE + alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + aux

Over a wide vocabulary (32k-256k) the logits of a batch outweigh the rest of its activations: where a family
gives its hidden states and its head apart (`features`, `head`), `chunked_loss` computes the same loss a block
of rows at a time, the head's product inside the block, so neither the whole logits nor their fp32 copy is ever
held: a head of one product (`LinearHead`) has each block's gradients formed as its logits are (Liger Kernel's
fused linear cross-entropy), any other head's block is made again in the backward pass.

Shapes: B batch, T target length, V vocabulary, C model dim, N = B * T rows.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from encdec.data.batch import IGNORE_INDEX
from encdec.models.model_config import ModelConfig
from encdec.models.outputs import Seq2SeqOutput


def loss_weights(cfg: ModelConfig) -> dict[str, float]:
    """The weight of each auxiliary term a family may return, by its name."""
    research = cfg.research.embedding_loss_coeff or 0.0  # None: the family returns no such term
    return {
        "moe_aux_encoder": cfg.experts.aux_loss_coef,
        "moe_aux_decoder": cfg.experts.aux_loss_coef,
        "moe_z_encoder": cfg.experts.z_loss_coef,
        "moe_z_decoder": cfg.experts.z_loss_coef,
        "embedding_loss": research,  # seed 000
        "encoder_loss": research,  # seed 001
        "ctc": cfg.audio.ctc_weight,  # the whisper family's CTC on its encoder (models.whisper)
    }


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy (in fp32) over the labelled tokens of logits (B, T, V) and labels (B, T);
    with label_smoothing, against targets mixed with that much of a uniform distribution."""
    return F.cross_entropy(
        logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing
    )


@dataclass
class Loss:
    """What training optimises and what it reports, kept apart."""

    ce: torch.Tensor  # plain cross-entropy: what is logged and validated
    objective: torch.Tensor  # the cross-entropy optimised: smoothed when label_smoothing > 0, else ce
    aux: torch.Tensor  # the weighted sum of the auxiliary terms (0 when there are none)
    distill_kl: torch.Tensor | None = None  # the distillation KL (detached, for the log); None without a teacher

    @property
    def total(self) -> torch.Tensor:
        return self.objective + self.aux


def weighted_aux(aux_losses: dict[str, torch.Tensor], cfg: ModelConfig, like: torch.Tensor) -> torch.Tensor:
    """sum weight[name] * term over `aux_losses`; a zero on `like`'s device when there is none."""
    weights = loss_weights(cfg)
    total = torch.zeros((), device=like.device, dtype=torch.float32)
    for name, value in aux_losses.items():
        total = total + weights[name] * value  # a name without a weight is a family's bug: KeyError
    return total


def compute_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    aux_losses: dict[str, torch.Tensor],
    cfg: ModelConfig,
    label_smoothing: float = 0.0,
) -> Loss:
    """The loss of one batch: logits (B, T, V), labels (B, T) with IGNORE_INDEX unscored."""
    ce = cross_entropy(logits, labels)
    objective = cross_entropy(logits, labels, label_smoothing) if label_smoothing else ce
    return Loss(ce, objective, weighted_aux(aux_losses, cfg, ce))


CHUNK_LOGITS = 1 << 25  # the most logits (32M: 128 MiB in fp32) one block of chunked_loss holds


@dataclass
class LinearHead:
    """A head that is one product, logits = (hidden * scale) @ weight^T (no cap, no bias, a plain or tied
    matrix): chunked_loss then forms each block's gradients in the forward pass instead of making it again."""

    weight: torch.Tensor  # (V, C)
    scale: float | torch.Tensor


def linear_head(embed: nn.Module, lm_head: nn.Module | None, scale, *extras: object) -> LinearHead | None:
    """A model's head as a LinearHead: the tied embedding's matrix, or lm_head's where it is a plain bias-free
    nn.Linear; None where anything else shapes the logits (`extras`: a cap, a fixed bias, not None) or where
    the matrix is adapted or quantized."""
    matrix = embed if lm_head is None else lm_head
    plain = type(matrix) is (nn.Embedding if lm_head is None else nn.Linear) and getattr(matrix, "bias", None) is None
    return LinearHead(matrix.weight, scale) if plain and all(e is None for e in extras) else None


def chunked_loss(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor] | LinearHead,
    labels: torch.Tensor,
    aux_losses: dict[str, torch.Tensor],
    cfg: ModelConfig,
    label_smoothing: float = 0.0,
    chunk: int = CHUNK_LOGITS,
) -> Loss:
    """compute_loss(head(hidden), labels, ...) without the whole logits: hidden (B, T, C), labels (B, T), the
    logits made `chunk` // V rows at a time; a LinearHead's gradients formed block by block in the forward
    pass (LinearCrossEntropy), any other head's block made again in the backward pass (checkpoint)."""
    h, y = hidden.flatten(0, 1), labels.flatten()  # (N, C), (N,)
    rows = max(1, chunk // cfg.vocab_size)
    count = (y != IGNORE_INDEX).sum()
    if isinstance(head, LinearHead):
        plain, optimised = LinearCrossEntropy.apply(h * head.scale, head.weight, y, rows, label_smoothing)
        ce = plain / count
        return Loss(ce, optimised / count if label_smoothing else ce, weighted_aux(aux_losses, cfg, ce))
    sums = torch.zeros(2, device=h.device, dtype=torch.float32)  # (plain, smoothed) CE summed over labelled rows
    for start in range(0, h.shape[0], rows):
        block = (h[start : start + rows], y[start : start + rows])
        sums = sums + checkpoint(_block_sums, *block, head, label_smoothing, use_reentrant=False)
    ce = sums[0] / count
    objective = sums[1] / count if label_smoothing else ce
    return Loss(ce, objective, weighted_aux(aux_losses, cfg, ce))


def _block_sums(h: torch.Tensor, y: torch.Tensor, head: Callable, label_smoothing: float) -> torch.Tensor:
    """Rows h (n, C) with labels y (n,) -> (2,): the cross-entropy of head(h) in fp32 summed over the labelled
    rows, plain and with `label_smoothing` (the plain one again where it is 0)."""
    logits = head(h).float()  # (n, V)
    plain = F.cross_entropy(logits, y, ignore_index=IGNORE_INDEX, reduction="sum")
    if not label_smoothing:
        return torch.stack([plain, plain])
    smoothed = F.cross_entropy(logits, y, ignore_index=IGNORE_INDEX, reduction="sum", label_smoothing=label_smoothing)
    return torch.stack([plain, smoothed])


class LinearCrossEntropy(torch.autograd.Function):
    """(h (N, C), weight (V, C), labels (N,), rows, label_smoothing) -> the cross-entropy of h @ weight^T in fp32
    summed over the labelled rows, plain and optimised (smoothed where label_smoothing > 0, else the plain one
    again). Blocks of `rows` rows; each block's gradients of the optimised sum are formed as its logits are,
    d/dlogits = softmax - (1 - s) onehot - s / V, so the backward pass only scales them (Liger Kernel's fused
    linear cross-entropy). The plain sum is for the log: with smoothing, no gradient flows through it."""

    @staticmethod
    def forward(ctx, h, weight, y, rows: int, label_smoothing: float):
        grad_h, grad_weight = torch.empty_like(h), torch.zeros_like(weight)
        plain = optimised = torch.zeros((), device=h.device, dtype=torch.float32)
        for start in range(0, h.shape[0], rows):
            hb, yb = h[start : start + rows], y[start : start + rows]
            logits = (hb @ weight.T).float()  # (n, V)
            plain = plain + F.cross_entropy(logits, yb, ignore_index=IGNORE_INDEX, reduction="sum")
            if label_smoothing:
                smoothed = F.cross_entropy(
                    logits, yb, ignore_index=IGNORE_INDEX, reduction="sum", label_smoothing=label_smoothing
                )
                optimised = optimised + smoothed
            g = logits.softmax(dim=-1).sub_(label_smoothing / logits.shape[-1])  # (n, V), in place from here on
            g.scatter_add_(1, yb.clamp(min=0)[:, None], torch.full_like(g[:, :1], label_smoothing - 1))
            g = g.mul_((yb != IGNORE_INDEX)[:, None]).to(h.dtype)  # labelled rows alone
            grad_h[start : start + rows] = g @ weight.to(h.dtype)
            if g.dtype == grad_weight.dtype:  # fp32: summed where it lies
                grad_weight.addmm_(g.T, hb)
            else:  # under autocast, the product in its dtype
                grad_weight += (g.T @ hb).to(weight.dtype)
        ctx.save_for_backward(grad_h, grad_weight)
        if not label_smoothing:
            return plain, plain.clone()  # one sum: a gradient through either is the same
        ctx.mark_non_differentiable(plain)
        return plain, optimised

    @staticmethod
    def backward(ctx, grad_plain, grad_optimised):
        grad_h, grad_weight = ctx.saved_tensors
        scale = grad_optimised if grad_plain is None else grad_plain + grad_optimised  # the same sum unsmoothed
        return grad_h * scale, grad_weight * scale, None, None, None


def distillation_kl(
    logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Mean KL(teacher_T || student_T) (in fp32) over the labelled tokens of logits (B, T, V), where labels
    (B, T) is not IGNORE_INDEX, as cross_entropy averages; 0 (not nan) for a batch without labels."""
    student = F.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    per_token = F.kl_div(student, teacher, reduction="none", log_target=True).sum(-1)  # (B, T)
    scored = labels != IGNORE_INDEX
    return torch.where(scored, per_token, 0.0).sum() / scored.sum().clamp(min=1)


def distilled(
    loss: Loss,
    logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    alpha: float,
    temperature: float,
) -> Loss:
    """`loss` with its objective mixed with the distillation term; T^2 keeps the soft targets' gradients at
    the scale of the hard ones' whatever T (Hinton et al. 2015, section 2). alpha 0 optimises the objective
    alone (bit for bit), the KL only logged."""
    kl = distillation_kl(logits, teacher_logits, labels, temperature)
    objective = loss.objective if alpha == 0 else (1 - alpha) * loss.objective + alpha * temperature**2 * kl
    return replace(loss, objective=objective, distill_kl=kl.detach())


def with_loss(
    logits: torch.Tensor, aux_losses: dict[str, torch.Tensor], labels: torch.Tensor | None, cfg: ModelConfig
) -> Seq2SeqOutput:
    """A family's named output: logits and aux terms, with loss and ce_loss filled when labels are given."""
    if labels is None:
        return Seq2SeqOutput(logits, aux_losses=aux_losses)
    loss = compute_loss(logits, labels, aux_losses, cfg)
    return Seq2SeqOutput(logits, loss.total, loss.ce, aux_losses)
