"""Validation samples a run generates from: (input, reference) pairs, and the trainer's generating evaluation.

The inputs are encoded as the run's training fed them (encdec.runs.text.RunTokenizer) and the
outputs generated and decoded by the loop `encdec evaluate` uses too (encdec.evaluation.generated).
"""

from typing import Any

import torch
from torch import nn

from encdec.data.objectives import PAIRED
from encdec.errors import ConfigError, DataError
from encdec.evaluation.generated import generate_texts
from encdec.evaluation.scoring import continuation_splits, continuation_texts
from encdec.evaluation.text_metrics import score_texts
from encdec.runs.speech_text import input_encoding
from encdec.runs.text import RunTokenizer
from encdec.tokenizers import Tokenizer
from encdec.training.run_config import RunConfig
from encdec.training.run_data import generation_view, validation_items

GENERATION_BATCH = 32  # examples decoded together at an evaluation


def sample_pairs(cfg: RunConfig, tokenizer: Tokenizer, n: int) -> list[tuple[str, str]]:
    """`n` (input, reference) texts from the validation split (a mixture's first member's: generation_view): its
    first pairs, or for a language model continuations of windows of its first texts (continuation_splits: a
    validation file that is one running text gives n of them, not one)."""
    cfg = generation_view(cfg)
    val = validation_items(cfg, n)
    if cfg.objective.kind in PAIRED:  # (source, target), or (recording, transcript)
        return [(s, t) for s, t in val]
    length = cfg.objective.seq_len
    ids = tokenizer.encode(continuation_texts(val, length, n)) if val else []
    return [tuple(tokenizer.decode([source, target])) for source, target in continuation_splits(ids, length, n)]


class GeneratedScores:
    """A fixed validation sample (`evaluation.generate` examples), decoded greedily or with
    `evaluation.num_beams` beams at each evaluation and scored against its references:
    HF's `predict_with_generate`, fairseq's `--eval-bleu`. Returns {"val_rougeL": ..., ...}.
    Generation starts from the run's generation defaults (`generation`), as its checkpoints carry them."""

    def __init__(self, cfg: RunConfig, tokenizer: Tokenizer, model: nn.Module, generation: dict[str, Any]):
        pairs = sample_pairs(cfg, tokenizer, cfg.evaluation.generate)
        if not pairs:
            raise DataError("evaluation.generate asks for generated examples but the validation split is empty")
        self.inputs = [source for source, _ in pairs]
        self.references = [reference for _, reference in pairs]
        text = RunTokenizer.for_text(generation_view(cfg).text_format(model), tokenizer)
        self.text = input_encoding(model.config, text)  # a speech model's: recordings in
        self.evaluation, self.generation = cfg.evaluation, generation
        device = next(model.parameters()).device
        cuda = [device.index or 0] if device.type == "cuda" else []
        try:  # what the model refuses (a length past its positions): now, not after the steps before the first
            with torch.random.fork_rng(devices=cuda):  # evaluation, whose training would be lost with the run;
                self.generated(model, self.inputs[:1])  # a sampling default draws nothing the run's steps draw
        except ConfigError as error:
            raise ConfigError(f"evaluation.generate cannot decode its examples: {error}") from None

    def generated(self, model: nn.Module, inputs: list[str]):
        options = dict(max_new_tokens=self.evaluation.max_new_tokens, num_beams=self.evaluation.num_beams)
        return generate_texts(model, self.text, inputs, GENERATION_BATCH, defaults=self.generation, **options)

    def __call__(self, model: nn.Module) -> dict[str, float]:
        generated = self.generated(model, self.inputs)
        return {f"val_{name}": value for name, value in score_texts(generated.predictions, self.references).items()}
