"""Training objectives: each turns documents or pairs into `Batch`es, deterministically given a seed.

Every objective offers `batch_at(epoch, step)` (a pure function of the position),
`next_batch()`, iteration, and `state_dict()` / `load_state_dict()` (a small
JSON-able dict) so a trainer resumes exactly. `build_objective(kind, ...)` builds
any of them by the run config's name (OBJECTIVES).
"""

from encdec.data.objectives.causal_lm import CausalLMObjective
from encdec.data.objectives.collate import collate_prefix_lm
from encdec.data.objectives.factory import OBJECTIVES, PAIRED, build_objective
from encdec.data.objectives.prefix_lm import prefix_lm_objective
from encdec.data.objectives.seq2seq import PairTemplate, Seq2SeqObjective, tokenize_pairs
from encdec.data.objectives.span_corruption import random_spans_noise_mask, span_corrupt
from encdec.data.objectives.ul2 import UL2Config, UL2Objective, ul2_mode_ids

__all__ = [
    "OBJECTIVES",
    "PAIRED",
    "CausalLMObjective",
    "PairTemplate",
    "Seq2SeqObjective",
    "UL2Config",
    "UL2Objective",
    "build_objective",
    "collate_prefix_lm",
    "prefix_lm_objective",
    "random_spans_noise_mask",
    "span_corrupt",
    "tokenize_pairs",
    "ul2_mode_ids",
]
