"""Model families, their configs and presets. `build_model(cfg)` is the one entry point.

    config.py            ModelConfig: every field, checked when built; research_config.py: seeds 000/001's
    presets.py           named configs (t5-small, rot5-tiny, transformer-base, ...)
    components.py        the builders every transformer family uses: attention, feed-forward or MoE,
                         norms, blocks, embeddings' scale and norm, the output head
    encoder_decoder.py   Transformer, T5, ROT5 (and the Marian, BART layouts)
    causal_lm.py         what the causal families share; decoder_only.py, ar_encdec.py (seed 000),
                         parallel_encdec.py (seed 001)
    rnn_seq2seq.py       the RNN encoder-decoder with attention
    outputs.py           named outputs; loss.py: the one loss (cross-entropy, weighted auxiliary terms),
                         whose terms come from moe_losses.py and research_losses.py
    init.py              weight initialisation; generation_mixin.py: model.generate
The parts themselves (attention, caches, positions, MoE, norms) are in encdec.modules.
"""

from torch import nn

from encdec.models.ar_encdec import AREncoderDecoder
from encdec.models.decoder_only import DecoderOnly
from encdec.models.encoder_decoder import EncoderDecoder
from encdec.models.init import init_weights
from encdec.models.model_config import ModelConfig, refuse_unused
from encdec.models.outputs import EncoderOutput, Seq2SeqOutput
from encdec.models.parallel_encdec import ParallelEncoderDecoder
from encdec.models.presets import preset, preset_names
from encdec.models.rnn_seq2seq import RNNSeq2Seq
from encdec.modules import LearnedPositions, RelativePositionBias

# family name -> model class; later families add a line here
FAMILY_CLASSES = {
    "encoder_decoder": EncoderDecoder,
    "ar_encdec": AREncoderDecoder,
    "parallel_encdec": ParallelEncoderDecoder,
    "decoder_only": DecoderOnly,
    "rnn_seq2seq": RNNSeq2Seq,
}


def build_model(cfg: ModelConfig) -> nn.Module:
    """Construct and initialise the model `cfg` describes. A family refuses (ConfigError, one sentence)
    any field of its class's UNUSED set away from its default, rather than build something else."""
    model = FAMILY_CLASSES[cfg.family](cfg)  # its constructor refuses unused fields first
    init_weights(model, cfg)
    return model


def check_fields(cfg: ModelConfig) -> None:
    """What build_model refuses about the fields of `cfg`, without building (for config loaders)."""
    refuse_unused(cfg, FAMILY_CLASSES[cfg.family].UNUSED)


def count_parameters(model: nn.Module, exclude_positions: bool = False) -> int:
    """Parameters, each shared tensor counted once; optionally without position tables
    (learned absolute positions and T5's relative bias), as the seeds count them."""
    skip = set()
    if exclude_positions:
        for module in model.modules():
            if isinstance(module, (LearnedPositions, RelativePositionBias)):
                skip.update(id(p) for p in module.parameters())
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


__all__ = [
    "AREncoderDecoder",
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOutput",
    "ModelConfig",
    "ParallelEncoderDecoder",
    "RNNSeq2Seq",
    "Seq2SeqOutput",
    "build_model",
    "check_fields",
    "count_parameters",
    "preset",
    "preset_names",
]
