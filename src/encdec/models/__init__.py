"""Model families, their configs and presets. `build_model(cfg)` is the one entry point.

    model_config.py      ModelConfig: every field, checked when built; research_config.py: seeds 000/001's
    config_specs.py      the specs ModelConfig nests (attention, positions, norms, embeddings, output, cross_attention,
                         experts, rnn, image_tokens, audio), and MOVED: the flat keys written before them
    presets.py           named configs (t5-small, rot5-tiny, transformer-base, ...)
    family_rules.py      what each family refuses (its UNUSED fields, its own rules), from the config alone
    parameter_count.py   a model's parameters counted from its config: the model built on the meta device
    family_classes.py    family name -> class (FAMILY_CLASSES), build_model, count_parameters of a built model
    components.py        the builders every transformer family uses: attention, feed-forward or MoE,
                         norms, blocks, embeddings' scale and norm, the output head
    encoder_decoder.py   Transformer, T5, ROT5 (and the Marian, BART layouts)
    causal_lm_shared.py  what the causal families share; decoder_only.py, ar_encdec.py (seed 000),
                         parallel_encdec.py (seed 001)
    rnn_seq2seq.py       the RNN encoder-decoder with attention
    whisper.py           the whisper family: the encoder-decoder over log-mel features (convolutional stem)
    outputs.py           named outputs; loss.py: the one loss (cross-entropy, weighted auxiliary terms),
                         whose terms come from moe_losses.py and research_losses.py
    init.py              weight initialisation; generation_mixin.py: model.generate
The parts themselves (attention, caches, positions, MoE, norms) are in encdec.modules.

The modules that need torch are imported on first use of their names (PEP 562), so a config, a preset, what a
family refuses import no torch (a parameter count builds the model, on the meta device).
"""

from encdec.lazy_names import lazy_getattr
from encdec.models.config_specs import CrossAttention, Experts, ImageTokens, Rnn
from encdec.models.family_rules import check_family, check_fields
from encdec.models.model_config import ModelConfig
from encdec.models.presets import preset, preset_names

LAZY = {  # module -> the names it gives
    "encdec.models.ar_encdec": ("AREncoderDecoder",),
    "encdec.models.decoder_only": ("DecoderOnly",),
    "encdec.models.encoder_decoder": ("EncoderDecoder",),
    "encdec.models.parallel_encdec": ("ParallelEncoderDecoder",),
    "encdec.models.rnn_seq2seq": ("RNNSeq2Seq",),
    "encdec.models.whisper": ("Whisper",),
    "encdec.models.outputs": ("EncoderOutput", "Seq2SeqOutput"),
    "encdec.models.init": ("init_weights",),
    "encdec.models.family_classes": ("FAMILY_CLASSES", "build_model", "count_parameters"),
    "encdec.models.parameter_count": ("ParameterCount", "count_parameters_of"),
}

__getattr__ = lazy_getattr(__name__, LAZY)


__all__ = [
    "AREncoderDecoder",
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOutput",
    "CrossAttention",
    "Experts",
    "ImageTokens",
    "ModelConfig",
    "Rnn",
    "ParallelEncoderDecoder",
    "RNNSeq2Seq",
    "Whisper",
    "ParameterCount",
    "Seq2SeqOutput",
    "build_model",
    "check_family",
    "check_fields",
    "count_parameters",
    "count_parameters_of",
    "preset",
    "preset_names",
]
