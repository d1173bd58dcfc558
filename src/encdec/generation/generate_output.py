"""What `generate(..., return_dict_in_generate=True)` returns: Hugging Face's fields, under its names.

Shapes: R returned rows (B * num_return_sequences), L output length, V vocabulary,
M rows the search holds (R for greedy and sampling, B * num_beams for beam search).
"""

from dataclasses import dataclass

import torch


@dataclass
class GenerateOutput:
    """sequences (R, L) as `generate` returns them by default. With output_scores=True, `scores` holds
    one (M, V) tensor per generated step: the processed logits (greedy, sampling) or the processed
    log-probabilities of each beam before its running score is added (beam search), as Hugging Face
    returns them; beam search also gives `sequences_scores` (R,), each returned hypothesis's
    sum(log p) / generated_length ** length_penalty, and `beam_indices` (R, L - P): the row of each step's
    scores its token was chosen from, -1 past its end. Speculative decoding (a draft model) says how many draft
    tokens its target steps accepted (`speculative`)."""

    sequences: torch.Tensor
    scores: tuple[torch.Tensor, ...] | None = None
    sequences_scores: torch.Tensor | None = None
    beam_indices: torch.Tensor | None = None
    speculative: object | None = None  # speculative decoding's SpeculativeStats (tokens per target step)
