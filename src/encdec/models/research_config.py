"""Options of the research encoder-decoders (SEEDS.md sections 3-4), nested in ModelConfig as `research`.

    model:
      family: ar_encdec
      research: {sub_pos_embed: YES_NO_LN, embedding_loss: MSE, embedding_loss_coeff: 8}

Names follow the seeds' code (yif-AI): order_type, sub_pos_embed (its
sub_pos_embed_to_decoder), add_pos_embed_to_decoder, add_ln_before_decoder_ff,
embedding_loss (embedding_loss_type; the parallel model's encoder loss),
embedding_loss_coeff, detach (detach_type; the parallel code's INIT / FINAL are
EMBEDDING / ENCODER_OUT here), embedding_ln_type, use_ln_on_encoder_out. With
embedding_loss NONE the last four stay unset; with a loss, unset ones take the
seed code's suggested values (coeff 1, ENCODER_OUT, INIT, true). In YAML quote
"NO": a bare NO reads as false.
"""

from dataclasses import dataclass, fields
from typing import Annotated, Literal

from encdec.errors import ConfigError, refuse_unknown_keys
from encdec.schema import Range, check

LOSS_OPTIONS = ("embedding_loss_coeff", "detach", "embedding_ln_type", "use_ln_on_encoder_out")
LOSS_DEFAULTS = {
    "embedding_loss_coeff": 1.0,
    "detach": "ENCODER_OUT",
    "embedding_ln_type": "INIT",
    "use_ln_on_encoder_out": True,
}


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
    embedding_loss: Literal["NONE", "MSE", "COSINE", "LOG_COSINE"] = (
        "NONE"  # disaffinity of the encoder output and the cumulative mean of E
    )
    embedding_loss_coeff: Annotated[float, Range(0, above=True)] | None = (
        None  # total = CE + coeff * embedding loss (training only)
    )
    detach: Literal["NONE", "EMBEDDING", "ENCODER_OUT"] | None = None  # which side the embedding loss does not train
    embedding_ln_type: Literal["NONE", "INIT", "AVG_CUM_SUM"] | None = (
        None  # LayerNorm on E before averaging (INIT) or after (AVG_CUM_SUM)
    )
    use_ln_on_encoder_out: bool | None = None  # LayerNorm (with bias) on the encoder output in the loss

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

    @property
    def extra_position(self) -> bool:
        """True when position T (one past the window) is looked up: the table has one more row."""
        return self.add_pos_embed_to_decoder or self.sub_pos_embed != "NO"

    @classmethod
    def from_dict(cls, values: dict) -> "ResearchOptions":
        refuse_unknown_keys(values, (f.name for f in fields(cls)), "unknown key model.research.{key}")
        return cls(**values)
