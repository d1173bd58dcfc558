"""Text in and out of a trained run's model, as its training fed it: `RunTokenizer`.

`encdec generate`, `encdec evaluate` and the trainer's generating evaluation all encode
through it: the run's source template applied, inputs cut to the length it was trained
with, batches padded on the side its family continues from. It speaks the small part of
Hugging Face's tokenizer interface those callers use, so a Hugging Face directory's own
tokenizer can stand in its place.
"""

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.models.causal_lm import PromptedLM
from encdec.runs.config import RunConfig
from encdec.tokenizers import Tokenizer


class RunTokenizer:
    """An encdec tokenizer behind the small part of Hugging Face's tokenizer interface used here.

    `padding_side` "left" pads a batch as the causal families' prompts need it (see `padding_side_for`).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        source_template: str = "{source}",
        padding_side: str = "right",
        max_length: int | None = None,
    ):
        if padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side must be left or right, got {padding_side!r}")
        self.tokenizer = tokenizer
        self.source_template = source_template
        self.padding_side = padding_side
        self.max_length = max_length  # inputs are cut to it, as training cut its sources

    @classmethod
    def for_run(
        cls, config: RunConfig, tokenizer: Tokenizer, model: nn.Module, max_length: int | None = None
    ) -> "RunTokenizer":
        """The run's text encoding: its seq2seq source template, its family's padding side, and inputs cut
        to `max_length` tokens (default: the length its training cut them to)."""
        objective = config.objective
        template = objective.source_template if objective.kind == "seq2seq" else "{source}"
        return cls(tokenizer, template, cls.padding_side_for(model), max_length or trained_source_length(config))

    def __call__(
        self,
        texts: list[str],
        return_tensors: str = "pt",
        padding: bool = True,
        truncation: bool = True,
        max_length: int | None = None,
    ) -> dict[str, torch.Tensor]:
        rows = self.tokenizer.encode([self.source_template.format(source=t) for t in texts])
        limit = (max_length or self.max_length) if truncation else None
        if limit is not None:
            rows = [row[:limit] for row in rows]
        if any(not row for row in rows):
            raise DataError("an input is empty after tokenization; give each input some text")
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, row in enumerate(rows):
            columns = slice(width - len(row), width) if self.padding_side == "left" else slice(0, len(row))
            ids[i, columns] = torch.tensor(row)
            mask[i, columns] = True
        return {"input_ids": ids, "attention_mask": mask}

    @staticmethod
    def padding_side_for(model: nn.Module) -> str:
        """Left for a causal family, whose prompts continue at their last column; right for the others."""
        return "left" if isinstance(model, PromptedLM) else "right"

    def batch_decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> list[str]:
        return self.tokenizer.decode(ids.tolist(), skip_special=skip_special_tokens)

    def decode(self, ids: torch.Tensor | list[int], skip_special_tokens: bool = True) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.tokenizer.decode([ids], skip_special=skip_special_tokens)[0]


def trained_source_length(config: RunConfig) -> int:
    """The longest input a run's model saw in training: a seq2seq run's sources, else its chunks."""
    objective = config.objective
    return objective.max_source_len if objective.kind == "seq2seq" else objective.seq_len
