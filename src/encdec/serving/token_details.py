"""Each generated token as the clients' APIs list it: its id, its piece of the text, its log-probability under
the scores it was chosen from (the model's log-softmax after the request's processors: temperature, top-p ...;
for plain greedy decoding the model's own), and the most likely alternatives where asked.

    pieces = token_pieces(server.generator, ids)                 # the text each token adds, as a stream shows it
    chosen = token_logprobs(out, row=0, ids=ids, top=2)          # [(logprob, [(id, logprob), ...]), ...]

A beam search keeps no per-token scores of its chosen sequence (its steps' scores are the beams' of that
step), so its tokens' log-probabilities are None; greedy and sampled outputs have them.
Shapes: R rows (samples of one input), V vocabulary.
"""

from __future__ import annotations

import torch

from encdec.generation.generate_output import GenerateOutput

TokenScore = tuple[float | None, list[tuple[int, float]]]  # a token's log-probability, the top alternatives'


def token_pieces(generator, ids: list[int]) -> list[str]:
    """The text each of `ids` adds to the decoded text so far (TextGenerator.decode_tokens, as a stream sends it):
    the pieces join to the whole text, special tokens dropped, not stripped."""
    pieces, shown = [], ""
    for i in range(len(ids)):
        text = generator.decode_tokens(ids[: i + 1])
        pieces.append(text[len(shown) :])
        shown = text
    return pieces


def step_logprobs(scores: torch.Tensor, token: int, top: int = 0) -> TokenScore:
    """scores (V,) of one step -> the log-probability of `token` and the `top` likeliest (id, log-probability)."""
    log_probs = scores.float().log_softmax(-1)  # (V,)
    alternatives = []
    if top > 0:
        values, indices = log_probs.topk(min(top, log_probs.shape[-1]))
        alternatives = list(zip(indices.tolist(), values.tolist()))
    return float(log_probs[token]), alternatives


def token_logprobs(out: GenerateOutput | torch.Tensor, row: int, ids: list[int], top: int = 0) -> list[TokenScore]:
    """Row `row`'s generated `ids` with their log-probabilities (and `top` alternatives each) from the scores
    `out` kept (generate's output_scores); (None, []) each where it kept none (a beam search, no scores)."""
    if not isinstance(out, GenerateOutput) or out.scores is None or out.sequences_scores is not None:
        return [(None, []) for _ in ids]
    return [step_logprobs(out.scores[t][row], token, top) for t, token in enumerate(ids)]
