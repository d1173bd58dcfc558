"""The family classes by name, and what needs them built: `build_model`, `count_parameters`.

The one table from `model.family` to its class; a new family is one line here (its refusals are
family_rules.py's; parameter_count.py counts the class's model, built on the meta device).
"""

from torch import nn

from encdec.errors import ConfigError
from encdec.models.ar_encdec import AREncoderDecoder
from encdec.models.decoder_only import DecoderOnly
from encdec.models.encoder_decoder import EncoderDecoder
from encdec.models.init import init_weights
from encdec.models.model_config import CAUSAL_LMS, ModelConfig
from encdec.models.parallel_encdec import ParallelEncoderDecoder
from encdec.models.rnn_seq2seq import RNNSeq2Seq
from encdec.models.whisper import Whisper
from encdec.modules import LearnedPositions, RelativePositionBias

FAMILY_CLASSES = {
    "encoder_decoder": EncoderDecoder,
    "ar_encdec": AREncoderDecoder,
    "parallel_encdec": ParallelEncoderDecoder,
    "decoder_only": DecoderOnly,
    "rnn_seq2seq": RNNSeq2Seq,
    "whisper": Whisper,
}


def build_model(cfg: ModelConfig) -> nn.Module:
    """Construct and initialise the model `cfg` describes. A family refuses (ConfigError, one sentence)
    what family_rules.check_family refuses, a field of its UNUSED set among them, rather than build something else."""
    model = FAMILY_CLASSES[cfg.family](cfg)  # its constructor refuses first
    init_weights(model, cfg)
    return model


def check_position_limits(cfg: ModelConfig, source: int, target: int, asked: str) -> None:
    """ConfigError where rows of `source` and `target` positions (a causal LM's one stream counts as its
    target), which `asked` names, reach past what the model `cfg` describes reads: a learned or sinusoidal
    table's rows, a causal LM's context. Checked when a run builds its model, not at the first batch."""
    limits = FAMILY_CLASSES[cfg.family].position_limits(cfg)
    for side, length, limit in zip(("source", "target"), (source, target), limits, strict=True):
        if limit is not None and length > limit:
            causal = cfg.family in CAUSAL_LMS
            reads = (
                f"its context is {limit:,}" if causal else f"its {cfg.positions.kind} position table has {limit:,} rows"
            )
            raise ConfigError(
                f"{asked} makes {'stream' if causal else side} rows of up to {length:,} tokens, but {reads} "
                "(model.positions.max); shorten the rows or use a model with more positions"
            )


def count_parameters(model: nn.Module, exclude_positions: bool = False) -> int:
    """Parameters, each shared tensor counted once; optionally without position tables
    (learned absolute positions and T5's relative bias), as the seeds count them."""
    skip = set()
    if exclude_positions:
        for module in model.modules():
            if isinstance(module, (LearnedPositions, RelativePositionBias)):
                skip.update(id(p) for p in module.parameters())
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)
