"""encdec: a workbench for encoder-decoder transformer language models.

import encdec
model = encdec.build_model(encdec.preset("rot5-tiny", vocab_size=1000))
model = encdec.load_hf("path/to/t5")      # a local Hugging Face T5 directory
model = encdec.from_pretrained(path)      # a run directory or a Hugging Face directory
model = encdec.quantize(model, "int8")    # int8 linear layers for decoding (CPU or CUDA)
tokenizer = encdec.load_tokenizer(path)
config = encdec.load_config("configs/tiny.yaml")   # a run config (encdec.training's RunConfig), checked
maps = encdec.attention_maps(path, "A dog runs.")  # cross- and encoder self-attention, as the model computed them
"""

from encdec.errors import CheckpointError, ConfigError, DataError, EncdecError
from encdec.lazy_names import lazy_getattr

__version__ = "0.1.0"

# the rest is imported on first use, so `encdec` starts (and answers Ctrl-C) before torch has loaded
LAZY = {
    "attention_maps": "encdec.inspection",
    "generate": "encdec.generation",
    "export_hf": "encdec.interop",
    "load_hf": "encdec.interop",
    "save_hf": "encdec.interop",
    "ModelConfig": "encdec.models",
    "build_model": "encdec.models",
    "count_parameters": "encdec.models",
    "preset": "encdec.models",
    "preset_names": "encdec.models",
    "quantize": "encdec.quantization",
    "RunConfig": "encdec.training",
    "load_config": "encdec.training",
    "export_run": "encdec.runs",
    "build_tokenizer": "encdec.tokenizers",
    "from_pretrained": "encdec.runs",
    "load_tokenizer": "encdec.runs",
}

__getattr__ = lazy_getattr(__name__, LAZY)


__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataError",
    "EncdecError",
    "ModelConfig",
    "RunConfig",
    "attention_maps",
    "build_model",
    "build_tokenizer",
    "count_parameters",
    "export_hf",
    "export_run",
    "from_pretrained",
    "generate",
    "load_config",
    "load_hf",
    "load_tokenizer",
    "preset",
    "preset_names",
    "quantize",
    "save_hf",
]
