"""The attention probabilities of one teacher-forced pass, as the model's own Attention modules computed
them: `record_attention(model, src_ids, tgt_ids)`.

Each Attention holding a list in `recorded` appends softmax(q k^T * scale + mask) for the q, k, mask and
scale it attends with (encdec.modules.attention), so RoPE, T5's relative bias, padding masks, grouped KV
heads and the score scale are those of the real pass: nothing here re-implements any of them. The pass is
the model's own `encode` and `decode`, teacher-forced (decoder input: the start token, then the target
without its last token), so row t of a cross-attention map is the query that predicts target token t.

Shapes: B batch, S source length, T target length, L layers (of one side), H heads.
"""

from dataclasses import dataclass

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.generation.interface import capabilities_of
from encdec.modules.recording import recording

# why a family has no maps: the transformer encoder-decoder is the one whose decoder reads a separate source
NO_MAPS = {
    "rnn_seq2seq": "its attention is Luong's over GRU states, not transformer attention layers",
    "decoder_only": "it is a causal language model over one token stream, with no source to attend to",
    "ar_encdec": "its cross-attention is causal over one token stream, not from a target to a source",
    "parallel_encdec": "its cross-attention is causal over one token stream, not from a target to a source",
}


@dataclass
class AttentionRecord:
    """Probabilities of one teacher-forced pass, in fp32 on the CPU; each row sums to 1, masked keys hold 0."""

    cross: torch.Tensor  # (B, L_dec, H, T, S): decoder layer l's cross-attention, row t predicting target token t
    # (a merged attention's source columns, T5Gemma 2's: what each query gives the source of its one softmax)
    encoder: torch.Tensor  # (B, L_enc, H, S, S): encoder layer l's self-attention, row s the query at token s


def check_has_maps(model: nn.Module) -> None:
    """ConfigError (one sentence) unless `model` is a transformer encoder-decoder, whose maps are recorded."""
    if capabilities_of(model).attention_maps:
        return
    family = model.config.family
    why = NO_MAPS.get(family, "it is not one of encdec's transformer encoder-decoders")
    raise ConfigError(
        f"attention maps are drawn for transformer encoder-decoders (Transformer, T5, ROT5, BART, Marian, "
        f"Pegasus) and the {family} model has none: {why}"
    )


def teacher_forced(tgt_ids: torch.Tensor, start_id: int) -> torch.Tensor:
    """tgt_ids (B, T) -> the decoder input (B, T): the start token, then each row's first T - 1 tokens."""
    start = torch.full_like(tgt_ids[:, :1], start_id)
    return torch.cat([start, tgt_ids[:, :-1]], dim=1)


@torch.no_grad()
def record_attention(
    model: nn.Module,
    src_ids: torch.Tensor,
    tgt_ids: torch.Tensor,
    src_mask: torch.Tensor | None = None,
    decoder_start_id: int | None = None,
) -> AttentionRecord:
    """The cross-attention of every decoder layer and the self-attention of every encoder layer while the
    model reads src_ids (B, S) (src_mask (B, S), nonzero at real tokens, as `encode` takes it) and is
    teacher-forced over tgt_ids (B, T), the tokens it should write (start token not included). Dropout is
    off for the pass (a training model is put back in training mode after it)."""
    check_has_maps(model)
    source_dims = 3 if capabilities_of(model).reads_features else 2  # a speech model's: (batch, bins, frames)
    if src_ids.dim() != source_dims or tgt_ids.dim() != 2 or src_ids.shape[0] != tgt_ids.shape[0]:
        raise DataError("src_ids and tgt_ids must be (batch, length) tensors with the same batch size")
    if src_ids.shape[-1] == 0 or tgt_ids.shape[1] == 0:
        raise DataError("the source and the target must each have at least one token")
    start = model.config.decoder_start_id if decoder_start_id is None else decoder_start_id
    layers = model.attention_layers()
    was_training = model.training
    model.eval()
    try:
        with recording(layers.encoder + layers.cross) as records:
            memory = model.encode(src_ids, src_mask)
            model.decode(teacher_forced(tgt_ids, start), memory)
    finally:
        model.train(was_training)
    encoder = [record[0] for record in records[: len(layers.encoder)]]  # one call each: (B, H, S, S)
    S = encoder[0].shape[-1]  # the memory's positions; a merged attention's keys are the target's, then these S
    cross = [record[0][..., -S:] for record in records[len(layers.encoder) :]]  # (B, H, T, S)
    return AttentionRecord(stacked(cross), stacked(encoder))


def stacked(maps: list[torch.Tensor]) -> torch.Tensor:
    """L tensors (B, H, Q, S) -> (B, L, H, Q, S) in fp32 on the CPU."""
    return torch.stack(maps, dim=1).float().cpu()
