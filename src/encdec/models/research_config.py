"""Options of the research encoder-decoders (SEEDS.md sections 3-4), nested in ModelConfig as `research`.

    model:
      family: ar_encdec
      research: {sub_pos_embed: YES_NO_LN, embedding_loss: MSE, embedding_loss_coeff: 8}

Names follow the seeds' code (yif-AI): order_type, sub_pos_embed (its
sub_pos_embed_to_decoder), add_pos_embed_to_decoder, add_ln_before_decoder_ff,
embedding_loss (embedding_loss_type; the parallel model's encoder loss),
embedding_loss_coeff, detach (detach_type; the parallel code's INIT / FINAL are
EMBEDDING / ENCODER_OUT here), embedding_ln_type, use_ln_on_encoder_out. With
embedding_loss NONE the loss options (LOSS_OPTIONS) stay unset; with a loss, unset
ones take the seed code's suggested values (coeff 1, ENCODER_OUT, INIT, true). In
YAML quote "NO": a bare NO reads as false.

Three options go beyond the seeds, from their "next steps" (encdec.models.research_losses):

    embedding_loss: L1 | HUBER            other disaffinity scores: mean absolute error, Huber (delta 1)
    embedding_aggregation: MEAN | MATMUL  the cumulative mean (default), or a learned causal mixing
                                          matrix that starts as that mean (max_positions^2 parameters)
    embedding_norm_affine: true | false   the loss's LayerNorms with learned gain and bias (default,
                                          the seeds'), or fixed ones: no degenerate minimum where
                                          both gains shrink to 0 (docs/experiments.md)
"""

from dataclasses import dataclass, fields
from typing import Annotated, Literal

from encdec.errors import ConfigError, refuse_unknown_keys
from encdec.schema import Range, check

LOSS_DEFAULTS = {
    "embedding_loss_coeff": 1.0,
    "detach": "ENCODER_OUT",
    "embedding_ln_type": "INIT",
    "use_ln_on_encoder_out": True,
    "embedding_aggregation": "MEAN",
    "embedding_norm_affine": True,
}
LOSS_OPTIONS = tuple(LOSS_DEFAULTS)  # set only with a loss


@dataclass
class ResearchOptions:
    order_type: Literal["ORIGINAL", "ALT"] = (
        "ORIGINAL"  # decoder block: self, cross, FFN (ORIGINAL) or cross, self, FFN (ALT)
    )
    sub_pos_embed: Literal["NO", "YES_NO_LN", "YES_LN"] = (
        "NO"  # subtract positions 1..T before the head; YES_LN adds a LayerNorm after
    )
    add_pos_embed_to_decoder: bool = False  # add positions 1..T to the decoder input
    add_ln_before_decoder_ff: bool = False  # LayerNorm before the Linear(C, C) that makes the decoder input
    embedding_loss: Literal["NONE", "MSE", "COSINE", "LOG_COSINE", "L1", "HUBER"] = (
        "NONE"  # disaffinity of the encoder output and the aggregated E
    )
    embedding_loss_coeff: Annotated[float, Range(0, 1e6, above=True)] | None = (
        None  # total = CE + coeff * embedding loss (training only)
    )
    detach: Literal["NONE", "EMBEDDING", "ENCODER_OUT"] | None = None  # which side the embedding loss does not train
    embedding_ln_type: Literal["NONE", "INIT", "AVG_CUM_SUM"] | None = (
        None  # LayerNorm on E before aggregating (INIT) or after (AVG_CUM_SUM)
    )
    use_ln_on_encoder_out: bool | None = None  # LayerNorm on the encoder output in the loss
    embedding_aggregation: Literal["MEAN", "MATMUL"] | None = (
        None  # cumulative mean of E, or a learned causal mixing matrix starting as that mean
    )
    embedding_norm_affine: bool | None = None  # the loss's LayerNorms learn a gain and bias (the seeds') or not

    def __post_init__(self):
        check(self, "model.research.")
        if self.embedding_loss == "NONE":
            for key in LOSS_OPTIONS:
                if getattr(self, key) is not None:
                    raise ConfigError(f"model.research.{key} is set but model.research.embedding_loss is NONE")
            return
        for key, default in LOSS_DEFAULTS.items():
            if getattr(self, key) is None:
                setattr(self, key, default)
        check(self, "model.research.")  # the defaults just set
        self.embedding_loss_coeff = float(self.embedding_loss_coeff)
        if not self.embedding_norm_affine and self.embedding_ln_type == "NONE" and not self.use_ln_on_encoder_out:
            raise ConfigError(
                "model.research.embedding_norm_affine false needs a LayerNorm in the loss (embedding_ln_type "
                "INIT or AVG_CUM_SUM, or use_ln_on_encoder_out true)"
            )

    @property
    def extra_position(self) -> bool:
        """True when position T (one past the window) is looked up: the table has one more row (with
        model.positions.kind rope, the table exists for this alone)."""
        return self.add_pos_embed_to_decoder or self.sub_pos_embed != "NO"

    @classmethod
    def from_dict(cls, values: dict) -> "ResearchOptions":
        refuse_unknown_keys(values, (f.name for f in fields(cls)), "unknown key model.research.{key}")
        return cls(**values)
