"""encdec: a workbench for encoder-decoder transformer language models.

import encdec
model = encdec.build_model(encdec.preset("rot5-tiny", vocab_size=1000))
model = encdec.load_hf("path/to/t5")      # a local Hugging Face T5 directory
model = encdec.from_pretrained(path)      # a run directory or a Hugging Face directory
model = encdec.quantize(model, "int8")    # int8 linear layers for decoding (CPU or CUDA)
tokenizer = encdec.load_tokenizer(path)
"""

from encdec.errors import CheckpointError, ConfigError, DataError, EncdecError
from encdec.generation import generate
from encdec.interop import export_hf, load_hf, save_hf
from encdec.models import ModelConfig, build_model, count_parameters, preset, preset_names
from encdec.quantization import quantize
from encdec.runs import export_run, from_pretrained, load_tokenizer

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataError",
    "EncdecError",
    "ModelConfig",
    "build_model",
    "count_parameters",
    "export_hf",
    "export_run",
    "from_pretrained",
    "generate",
    "load_hf",
    "load_tokenizer",
    "preset",
    "preset_names",
    "quantize",
    "save_hf",
]
