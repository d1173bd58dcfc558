"""`model.generate(...)`, as Hugging Face models spell it, for every family."""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch

from encdec.generation import generate


class GenerationMixin:
    """Gives a model that implements start/step a `generate` method, and the generation defaults it starts from."""

    # The options `generate` starts from: a loaded checkpoint's (its generation.json, or a Hugging Face
    # directory's generation_config.json), set by the loader that read them; none for a new model.
    generation_defaults: Mapping[str, Any] = MappingProxyType({})
    # A Hugging Face directory's own generation keys beyond generate's options (Whisper's lang_to_id, task_to_id,
    # ...: interop's Family.generation_keys), set by load_hf and written back on export; none for a new model.
    hf_generation: Mapping[str, Any] = MappingProxyType({})

    def generate(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None, **options) -> torch.Tensor:
        """Exactly `encdec.generate(self, src_ids, src_mask, **options)`: (B * returns, L) token ids."""
        return generate(self, src_ids, src_mask, **options)
