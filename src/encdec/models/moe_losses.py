"""The mixture-of-experts terms of a model's loss (SEEDS.md section 2), the same in every family.

Router logits are gathered across the layers of each side (encoder, decoder) and give per side
the load-balance loss (aux) and the router z-loss. A model returns the terms unweighted in
Seq2SeqOutput.aux_losses as moe_aux_{side}, moe_z_{side}; a stack without experts contributes
none. encdec.models.loss weighs them:

    loss = CE + aux_loss_coef * (aux_encoder + aux_decoder) + z_loss_coef * (z_encoder + z_decoder)
"""

import torch

from encdec.modules import load_balance_loss, router_z_loss


def moe_losses(
    encoder_logits: list[torch.Tensor],
    decoder_logits: list[torch.Tensor],
    top_k: int = 1,
    encoder_real: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Router logits, one (N, E) per MoE layer of each side -> the unweighted terms by name. The load balance
    counts each token's `top_k` choices, the encoder's over its real tokens where `encoder_real` (B, S) is given
    (Experts.balance "all": transformers' NLLB-MoE loss); else the first choice of every token (Switch). Where
    `rows` (B,) bool is given, both terms of both sides count the tokens of those rows alone: a row of padding
    alone (training.bucket_length's) takes no part in the loss, as in no other."""
    losses = {}
    for side, logits in (("encoder", encoder_logits), ("decoder", decoder_logits)):
        if logits:
            gathered = torch.cat(logits)
            tokens = gathered.shape[0] // len(logits)  # (B * S) or (B * T) of each layer
            kept = None if rows is None else rows.bool().repeat_interleave(tokens // rows.shape[0]).repeat(len(logits))
            real = kept
            if side == "encoder" and encoder_real is not None:
                real = encoder_real.reshape(-1).bool().repeat(len(logits))
                real = real if kept is None else real & kept
            losses[f"moe_aux_{side}"] = load_balance_loss(gathered, top_k, real)
            losses[f"moe_z_{side}"] = router_z_loss(gathered, kept)
    return losses
