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
LAZY = {  # module -> the names it gives
    "encdec.inspection": ("attention_maps",),
    "encdec.generation": ("generate",),
    "encdec.interop": ("export_hf", "load_hf", "save_hf"),
    "encdec.models": ("ModelConfig", "build_model", "count_parameters", "preset", "preset_names"),
    "encdec.quantization": ("quantize",),
    "encdec.training": ("RunConfig", "load_config"),
    "encdec.runs": ("export_run", "from_pretrained", "load_tokenizer"),
    "encdec.tokenizers": ("build_tokenizer",),
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
