"""RNN seq2seq (seed 002, part 2; SEEDS.md section 1): the historical baseline.

    src_ids -> embed -> RNN encoder (GRU or LSTM, n_encoder_layers) -> states (B, S, C), last hidden h
    tgt_ids -> embed -> RNN decoder (decoder_layers), initial hidden = h -> outputs o (B, T, C)
    with attention (Luong et al. 2015, "general"): a = softmax(o W s^T) over source states s,
        o = tanh(W_c [o; a s])
    -> head (tied to the embeddings unless embeddings.tie is false) -> logits

Without attention the last encoder hidden state is all the decoder knows of the
source (the lecture's "naive idea"). Padding: the encoder packs each source to
its length, so h is the state after its last real token, and attention skips
padded positions. With src_ids None (causal-LM batches) the decoder runs alone
as an RNN language model from a zero state. Decoding carries the hidden state;
beam reordering indexes it. It uses d_model, the layer counts, bias, dropout, init and
embeddings.tie, and refuses the transformer's settings (UNUSED) in one sentence.

Shapes: B batch, S source length, T target length, L layers, C model dim, V vocabulary.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from encdec.models.family_rules import UNUSED_BY_FAMILY, check_family
from encdec.models.generation_mixin import GenerationMixin
from encdec.models.loss import with_loss
from encdec.models.model_config import ModelConfig
from encdec.models.outputs import Seq2SeqOutput
from encdec.modules import Dropout, as_bool_mask, lm_head

Hidden = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # GRU: h (L, B, C); LSTM: (h, c)


def index_hidden(hidden: Hidden | None, index: torch.Tensor) -> Hidden | None:
    """Keep batch rows `index` of a GRU or LSTM state."""
    if hidden is None:
        return None
    if isinstance(hidden, tuple):
        return tuple(h.index_select(1, index) for h in hidden)
    return hidden.index_select(1, index)


class LuongAttention(nn.Module):
    """Multiplicative ("general") attention of decoder outputs over encoder states."""

    def __init__(self, d_model: int, bias: bool):
        super().__init__()
        self.score = nn.Linear(d_model, d_model, bias=False)
        self.combine = nn.Linear(2 * d_model, d_model, bias=bias)

    def forward(self, out: torch.Tensor, states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """out (B, T, C), states (B, S, C), mask (B, S) True at real tokens -> (B, T, C)."""
        scores = self.score(out) @ states.transpose(1, 2)  # (B, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, :], torch.finfo(scores.dtype).min)
        context = scores.softmax(dim=-1) @ states  # (B, T, C)
        return torch.tanh(self.combine(torch.cat((out, context), dim=-1)))


@dataclass
class RNNState:
    """The decoder's hidden state per row, and the encoder states its attention reads."""

    hidden: Hidden | None  # (L, R, C), or (h, c)
    states: torch.Tensor | None  # (R, S, C); rows of one example are equal, so reordering leaves it
    mask: torch.Tensor | None  # (R, S)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (R,), each within its example's rows."""
        self.hidden = index_hidden(self.hidden, index)


class RNNSeq2Seq(GenerationMixin, nn.Module):
    UNUSED = UNUSED_BY_FAMILY["rnn_seq2seq"]  # the transformer's settings: attention, norms, positions, ...

    @staticmethod
    def position_limits(cfg: ModelConfig) -> tuple[int | None, int | None]:
        """(source, target): recurrent, with no position table: any length on either side."""
        return None, None

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_family(cfg)
        self.config = cfg
        rnn = nn.GRU if cfg.rnn.cell == "gru" else nn.LSTM
        layers, dropout = cfg.n_encoder_layers, cfg.dropout if cfg.n_encoder_layers > 1 else 0.0
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.encoder = rnn(cfg.d_model, cfg.d_model, layers, bias=cfg.bias, batch_first=True, dropout=dropout)
        self.decoder = rnn(cfg.d_model, cfg.d_model, layers, bias=cfg.bias, batch_first=True, dropout=dropout)
        self.attention = LuongAttention(cfg.d_model, cfg.bias) if cfg.rnn.attention else None
        self.dropout = Dropout(cfg.dropout)
        self.lm_head = None if cfg.embeddings.tie else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Hidden]:
        """src_ids (B, S), src_mask (B, S) bool, 0/1 integer or float -> encoder states (B, S, C) and the
        hidden state after each source's last token."""
        src_mask = as_bool_mask(src_mask)
        x = self.dropout(self.embed(src_ids))
        if src_mask is None or bool(src_mask.all()):
            return self.encoder(x)
        lengths = src_mask.sum(-1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        states, hidden = self.encoder(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=src_ids.shape[1])
        return states, hidden

    def decode(
        self, tgt_ids: torch.Tensor, hidden: Hidden | None, states: torch.Tensor | None, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, Hidden]:
        """tgt_ids (B, T) from `hidden` -> logits (B, T, V) and the hidden state after them."""
        out, hidden = self.decoder(self.dropout(self.embed(tgt_ids)), hidden)  # (B, T, C)
        if self.attention is not None and states is not None:
            out = self.attention(out, states, mask)
        return lm_head(self.dropout(out), self.embed, self.lm_head), hidden

    def forward(
        self,
        src_ids: torch.Tensor | None,
        tgt_ids: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> Seq2SeqOutput:
        """src_ids (B, S) or None, tgt_ids (B, T) decoder input ids, src_mask (B, S) as encode() takes it,
        labels (B, T) with -100 ignored."""
        src_mask = as_bool_mask(src_mask)
        states = hidden = None
        if src_ids is not None:
            states, hidden = self.encode(src_ids, src_mask)
        logits, _ = self.decode(tgt_ids, hidden, states, src_mask)
        return with_loss(logits, {}, labels, self.config)

    @torch.no_grad()
    def start(
        self, src_ids: torch.Tensor | None, src_mask: torch.Tensor | None, max_new_tokens: int, beams: int = 1
    ) -> RNNState:
        """Encode src_ids (B, S) once; every one of the `beams` rows of an example starts from its state."""
        if src_ids is None:
            return RNNState(None, None, None)
        src_mask = as_bool_mask(src_mask)
        states, hidden = self.encode(src_ids, src_mask)
        rows = torch.arange(src_ids.shape[0], device=src_ids.device).repeat_interleave(beams)
        mask = src_mask.index_select(0, rows) if src_mask is not None else None
        return RNNState(index_hidden(hidden, rows), states.index_select(0, rows), mask)

    @torch.no_grad()
    def step(self, tgt_ids: torch.Tensor, state: RNNState) -> torch.Tensor:
        """tgt_ids (R, t) -> logits (R, t, V); the hidden state moves past them."""
        logits, state.hidden = self.decode(tgt_ids, state.hidden, state.states, state.mask)
        return logits
