"""`model.generate(...)`, as Hugging Face models spell it, for every family."""

import torch


class GenerationMixin:
    """Gives a model that implements start/step a `generate` method."""

    def generate(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None, **options) -> torch.Tensor:
        """Exactly `encdec.generate(self, src_ids, src_mask, **options)`: (B * returns, L) token ids."""
        from encdec.generation import generate  # generation sits above the models: imported when called

        return generate(self, src_ids, src_mask, **options)
