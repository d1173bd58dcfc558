"""Generation for every encdec family: greedy, beam search and sampling through the model's cache.

    ids = encdec.generate(model, src_ids, src_mask, num_beams=4, max_new_tokens=64)

Token for token what Hugging Face's `generate()` returns for an encoder-decoder on
the same weights, with its options: logits processors, decoder prefixes
(`decoder_input_ids`), stop strings, diverse (group) beam search and, with
`return_dict_in_generate=True`, the per-step scores (`GenerateOutput`). The search
code only needs the two methods of `interface.Steppable` (`start`, `step`) and the
state's `reorder`.
"""

from encdec.generation.beam_search import beam_search
from encdec.generation.config import GenerationConfig
from encdec.generation.generate import generate
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.group_beam_search import group_beam_search
from encdec.generation.interface import SearchState, Steppable
from encdec.generation.search import sample_search
from encdec.generation.strategies import STRATEGIES, strategy_for
from encdec.modules import DecodeState

__all__ = [
    "DecodeState",
    "GenerateOutput",
    "GenerationConfig",
    "STRATEGIES",
    "SearchState",
    "Steppable",
    "beam_search",
    "generate",
    "group_beam_search",
    "sample_search",
    "strategy_for",
]
