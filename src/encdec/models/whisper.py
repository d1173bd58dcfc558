"""The whisper family (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision"): the
encoder-decoder whose encoder reads log-mel features in place of token ids.

Only the encoder's front differs from the encoder-decoder's: a convolutional stem (Conv1d(n_mels, C, 3, padding 1)
and GELU, Conv1d(C, C, 3, stride 2, padding 1) and GELU: 3000 frames of 10 ms become 1500 positions) and a fixed
sinusoidal table of model.audio.max_source_positions rows (Whisper's `sinusoids`, kept with the weights: a
checkpoint's is read as given), then the encoder's pre-norm blocks and its closing norm. Every frame is a key, as
transformers' Whisper ignores an attention mask. Clips of fewer frames than 2 x max_source_positions read the
table's first rows (a short clip trains faster); transformers' Whisper takes exactly that many (30 s, padded). The decoder, the head, the DecodeState and generation are the
encoder-decoder's: learned positions, unscaled token embeddings, a head tied to the token table (interop/whisper
reads and writes Hugging Face's WhisperForConditionalGeneration).

CTC (model.audio.ctc_weight > 0, training only): the hybrid CTC/attention objective of Kim, Hori and Watanabe
(2017, "Joint CTC-attention based end-to-end speech recognition using multi-task learning"), whose CTC term on the
encoder makes the decoder's cross-attention find its monotonic alignment in far fewer steps. The encoder's output
goes through the model's own tied head (no new weights: the model stays a Whisper, exported as one), blank is
<|endoftext|>, and the targets are the decoder input's text tokens, those below <|endoftext|> (Whisper's
vocabulary puts every special token and timestamp after it), in order. Every encoder position is an input frame
(a clip's padding is silence, read as blanks). The term is averaged over the rows as torch's ctc_loss averages
(each row's loss over its target length); its log-probabilities take S x B x V floats, which at Whisper's 51,865
tokens and 1,500 positions is 310 MB a row: it is a from-scratch aid for small models.

Shapes: B batch, M mel bins, F frames, S encoder positions (F / 2, rounded up), C model dim, T target length,
V vocabulary.
"""

import torch
from torch import nn
from torch.nn import functional as F

from encdec.errors import ConfigError, DataError
from encdec.generation.interface import Capabilities
from encdec.models.encoder import Encoder
from encdec.models.encoder_decoder import EncoderDecoder, table_rows
from encdec.models.family_rules import UNUSED_BY_FAMILY
from encdec.models.model_config import ModelConfig
from encdec.models.outputs import EncoderOutput
from encdec.modules import Packing
from encdec.modules.positions import fairseq_table


def sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's encoder positions (length, channels): sines then cosines of timescales 10000^(-i / (channels/2 - 1)),
    which are fairseq's table from position 0 (modules.positions.fairseq_table), computed as Whisper computes it."""
    return fairseq_table(0, length, channels)


class FixedPositions(nn.Module):
    """A fixed table of position vectors (rows, C) kept with the weights (a buffer: loaded and exported, never
    trained), added to the first S rows of an input."""

    def __init__(self, rows: int, d_model: int):
        super().__init__()
        self.register_buffer("weight", sinusoids(rows, d_model))

    def forward(self, length: int) -> torch.Tensor:
        return self.weight[:length]


class AudioEncoder(Encoder):
    """The encoder's blocks and closing norm (models.encoder) over Whisper's convolutional stem and sinusoids."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, None, None)  # no token table, no RoPE
        audio = cfg.audio
        self.n_mels, self.max_frames = audio.n_mels, 2 * audio.max_source_positions
        self.conv1 = nn.Conv1d(audio.n_mels, cfg.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(cfg.d_model, cfg.d_model, kernel_size=3, stride=2, padding=1)
        self.positions = FixedPositions(audio.max_source_positions, cfg.d_model)  # in place of the token positions

    def forward(
        self, features: torch.Tensor, src_mask: torch.Tensor | None = None, packing: Packing | None = None
    ) -> EncoderOutput:
        """features (B, M, F) -> memory (B, S, C), every position real: `src_mask` is not read (transformers'
        Whisper ignores it; a clip is padded with the log-mel of silence)."""
        if packing is not None:
            raise ConfigError("the whisper family cannot read a packed batch: its inputs are log-mel features")
        self.check_features(features)
        x = F.gelu(self.conv2(F.gelu(self.conv1(features.to(self.conv1.weight.dtype)))))
        x = x.transpose(1, 2).contiguous()  # (B, S, C) in memory too: else every sum after it keeps (B, C, S)'s layout
        S = x.shape[1]
        x = self.dropout(x + self.positions(S).to(x.dtype))
        return self.blocks_over(x, None, None, torch.arange(S, device=x.device))

    def check_features(self, features: torch.Tensor) -> None:
        """DataError, one sentence, where `features` is not a (batch, n_mels, frames) float tensor of at most
        2 x max_source_positions frames (no host sync)."""
        shape = tuple(features.shape) if isinstance(features, torch.Tensor) else None
        if shape is None or len(shape) != 3 or not features.is_floating_point() or shape[1] != self.n_mels:
            raise DataError(
                f"this model reads log-mel features, a (batch, {self.n_mels}, frames) float tensor; got "
                + (f"{features.dtype} of shape {shape}" if shape is not None else type(features).__name__)
            )
        if shape[0] == 0 or shape[2] == 0:
            raise DataError("the input is empty: it has no frames to encode")
        if shape[2] > self.max_frames:
            raise DataError(
                f"the input has {shape[2]:,} frames but this model reads at most {self.max_frames:,} "
                f"(model.audio.max_source_positions {self.max_frames // 2:,} after its stride-2 convolution)"
            )


class Whisper(EncoderDecoder):
    """The encoder-decoder with Whisper's audio encoder: encode(features) once, the decoder's steps as for text."""

    UNUSED = UNUSED_BY_FAMILY["whisper"]

    @staticmethod
    def position_limits(cfg: ModelConfig) -> tuple[int | None, int | None]:
        """(None, target positions): the sources are frames, not token rows, which the encoder bounds itself by
        model.audio.max_source_positions (AudioEncoder.check_features, one sentence)."""
        return None, table_rows(cfg)

    def build_encoder(self, cfg: ModelConfig, rotary, local_rotary) -> Encoder:
        return AudioEncoder(cfg)

    def check_lengths(self, src_ids: torch.Tensor, max_new_tokens: int) -> None:
        """The features' own check (AudioEncoder.check_features), and the decoder's table's rows."""
        self.encoder.check_features(src_ids)
        rows = table_rows(self.config)
        if max_new_tokens > rows:
            raise ConfigError(f"max_new_tokens is {max_new_tokens} but this model decodes at most {rows}")

    def attention_scores(self, batch: int, source_len: int) -> int:
        """As the encoder-decoder's, over the S = F / 2 positions `source_len` frames make."""
        return self.encoder.score_numbers(batch, -(-source_len // 2))

    def features(
        self, src_ids: torch.Tensor, tgt_ids: torch.Tensor, src_mask: torch.Tensor | None, packing: Packing | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The encoder-decoder's decoder hidden states (B, T, C), and in training with model.audio.ctc_weight the
        term "ctc" of the encoder's output against the text tokens of `tgt_ids`."""
        memory = self.encode(src_ids, src_mask, packing)
        hidden, _ = self.decoder(tgt_ids, memory, packing)  # no experts: no router logits
        if not (self.training and self.config.audio.ctc_weight):
            return hidden, {}
        return hidden, {"ctc": self.ctc_loss(memory.hidden, tgt_ids)}

    def ctc_loss(self, memory: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        """CTC of memory (B, S, C) through the head against each row's tokens of tgt_ids (B, T) below
        <|endoftext|>, moved to the row's front in order (a stable sort: no host sync), blank <|endoftext|>."""
        blank = self.config.eos_id
        text = tgt_ids < blank  # (B, T)
        targets = tgt_ids.gather(1, (~text).to(torch.uint8).argsort(dim=1, stable=True))  # text tokens first
        log_probs = self.head(memory).float().log_softmax(dim=-1).transpose(0, 1)  # (S, B, V)
        S, B = log_probs.shape[:2]
        frames = torch.full((B,), S, dtype=torch.long, device=tgt_ids.device)
        return F.ctc_loss(log_probs, targets, frames, text.sum(dim=1), blank=blank, zero_infinity=True)

    @property
    def capabilities(self) -> Capabilities:
        """Steps on the last position alone, attention maps, rows that join and leave the server's running batch;
        its sources are features (`reads_features`), which do not pack into one row."""
        return Capabilities(steps_last_only=True, continuous_batching=True, attention_maps=True, reads_features=True)
