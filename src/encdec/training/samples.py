"""Text in and out of a trained model: its tokenizer behind Hugging Face's call interface, validation samples.

`encdec generate`, `encdec evaluate` and the trainer's generating evaluation all feed a
model text the way its training did: the run's source template applied, inputs cut to
the length it was trained with, batches padded on the side its family continues from.
"""

import torch

from encdec.errors import ConfigError, DataError
from encdec.evaluation.metrics import score_texts
from encdec.generation import generate
from encdec.models.causal_lm import PromptedLM
from encdec.training.data import read_items

GENERATION_BATCH = 32  # examples decoded together at an evaluation


class RunTokenizer:
    """An encdec tokenizer behind the small part of Hugging Face's tokenizer interface used here.

    `padding_side` "left" pads a batch as the causal families' prompts need it (see `padding_side_for`).
    """

    def __init__(
        self, tokenizer, source_template: str = "{source}", padding_side: str = "right", max_length: int | None = None
    ):
        if padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side must be left or right, got {padding_side!r}")
        self.tokenizer = tokenizer
        self.source_template = source_template
        self.padding_side = padding_side
        self.max_length = max_length  # inputs are cut to it, as training cut its sources

    def __call__(
        self,
        texts: list[str],
        return_tensors: str = "pt",
        padding: bool = True,
        truncation: bool = True,
        max_length: int | None = None,
    ) -> dict:
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
    def padding_side_for(model) -> str:
        """Left for a causal family, whose prompts continue at their last column; right for the others."""
        return "left" if isinstance(model, PromptedLM) else "right"

    def batch_decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> list[str]:
        return self.tokenizer.decode(ids.tolist(), skip_special=skip_special_tokens)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.tokenizer.decode([ids], skip_special=skip_special_tokens)[0]


def trained_source_length(config) -> int:
    """The longest input a run's model saw in training: a seq2seq run's sources, else its chunks."""
    objective = config.objective
    return objective.max_source_len if objective.kind == "seq2seq" else objective.seq_len


def sample_pairs(cfg, tokenizer, n: int) -> list[tuple[str, str]]:
    """(input, reference) texts from the validation split."""
    _, val = read_items(cfg)
    if cfg.objective.kind == "seq2seq":
        return [(s, t) for s, t in val[:n]]
    pairs = []
    for text in val[:n]:
        ids = tokenizer.encode([text])[0][: cfg.objective.seq_len]
        cut = max(len(ids) // 2, 2)  # UL2's S split
        source, target = tokenizer.decode([ids[:cut], ids[cut:]])
        pairs.append((source, target))
    return pairs


class GeneratedScores:
    """A fixed validation sample (`evaluation.generate` examples), decoded greedily or with
    `evaluation.num_beams` beams at each evaluation and scored against its references:
    HF's `predict_with_generate`, fairseq's `--eval-bleu`. Returns {"val_rougeL": ..., ...}."""

    def __init__(self, cfg, tokenizer, model, device: torch.device):
        pairs = sample_pairs(cfg, tokenizer, cfg.evaluation.generate)
        if not pairs:
            raise DataError("evaluation.generate asks for generated examples but the validation split is empty")
        template = cfg.objective.source_template if cfg.objective.kind == "seq2seq" else "{source}"
        encode = RunTokenizer(tokenizer, template, RunTokenizer.padding_side_for(model), trained_source_length(cfg))
        self.batches = [
            encode([source for source, _ in pairs[i : i + GENERATION_BATCH]])
            for i in range(0, len(pairs), GENERATION_BATCH)
        ]
        self.references = [reference for _, reference in pairs]
        self.tokenizer, self.device, self.evaluation = tokenizer, device, cfg.evaluation

    def __call__(self, model) -> dict[str, float]:
        predictions = []
        for batch in self.batches:
            ids = generate(
                model,
                batch["input_ids"].to(self.device),
                batch["attention_mask"].to(self.device),
                max_new_tokens=self.evaluation.max_new_tokens,
                num_beams=self.evaluation.num_beams,
            )
            predictions += [text.strip() for text in self.tokenizer.decode(ids[:, 1:].tolist())]
        return {f"val_{name}": value for name, value in score_texts(predictions, self.references).items()}
