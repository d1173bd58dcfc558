"""Greedy decoding's blocked argmax equals torch's argmax: the first maximum, a NaN counting as one."""

import pytest
import torch

from encdec.generation.search import ARGMAX_BLOCK, argmax


@pytest.mark.parametrize("rows, vocab", [(1, 32128), (24, 32128), (3, 8 * ARGMAX_BLOCK), (2, 1000), (5, 7)])
def test_blocked_argmax_equals_torch_argmax_with_ties_infinities_and_nans(rows, vocab):
    g = torch.Generator().manual_seed(rows * vocab)
    scores = torch.randn(rows, vocab, generator=g)
    scores[0, -1] = scores[0, 0] = 50.0  # a tie across blocks: the first wins
    if rows > 1:
        scores[1] = float("-inf")  # all -inf: index 0
    if rows > 2:
        scores[2, vocab // 2] = float("nan")  # a NaN is the maximum, the first of them
        scores[2, vocab - 1] = float("nan")
    if rows > 3:
        scores[3, 1] = scores[3, 2] = float("inf")
    got = argmax(scores)
    assert torch.equal(got, scores.argmax(dim=-1))
    assert torch.equal(argmax(scores[:, :-1].contiguous()), scores[:, :-1].argmax(dim=-1))  # any width
