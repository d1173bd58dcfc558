"""The whole-file likelihood of encdec.evaluation.likelihood: every token scored once, with the context it promises,
and a batch scoring what its examples score one by one."""

import math

import numpy as np
import pytest
import torch

import encdec
from encdec.evaluation.encoding import TextEncoding
from encdec.evaluation.likelihood import causal_windows, denoiser_windows, document_examples, total_nll
from encdec.evaluation.scoring import Example, group_pairs, word_perplexity

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("n, length", [(1, 8), (7, 8), (8, 8), (9, 8), (40, 8), (41, 7), (5, 1), (30, 2)])
def test_causal_windows_score_every_token_but_the_first_once_with_half_a_window_of_context(n, length):
    tokens = list(range(100, 100 + n + 1))  # the opening EOS stands first
    windows = list(causal_windows(tokens, length))
    targets = [t for _, target in windows for t in target.tolist()]
    assert targets == tokens[1:]
    for number, (prefix, target) in enumerate(windows):
        start = tokens.index(int(prefix[0]))
        assert prefix.tolist() + target.tolist() == tokens[start : start + len(prefix) + len(target)]  # contiguous
        assert len(prefix) + len(target) - 1 <= length  # the inputs fit the context
        if number:
            assert len(prefix) >= length - max(length // 2, 1) + 1  # at least L - stride tokens before each target


def test_denoiser_windows_predict_each_half_window_from_the_one_before():
    encoding = TextEncoding(None, None, None, 8, input_prefix=[7], input_suffix=[1])
    tokens = list(range(10, 21))  # 11 tokens: windows of 4, 4 and 3
    windows = list(denoiser_windows(tokens, 8, encoding, eos_id=1))
    assert [t.tolist() for _, t in windows] == [tokens[0:4], tokens[4:8], tokens[8:11]]
    assert [s.tolist() for s, _ in windows] == [[7, 1], [7, *tokens[0:4], 1], [7, *tokens[4:8], 1]]
    bare = TextEncoding(None, None, None, 8)
    assert next(denoiser_windows(tokens, 8, bare, eos_id=1))[0].tolist() == [1]  # the empty input: EOS


@pytest.mark.parametrize("preset", ["t5-tiny", "decoder_only-tiny"])
def test_a_batch_of_windows_scores_what_they_score_one_by_one(preset):
    model = encdec.build_model(encdec.preset(preset, vocab_size=50, pad_id=0, eos_id=1, decoder_start_id=0)).eval()
    rng = np.random.default_rng(0)
    documents = [rng.integers(2, 50, size=n).tolist() for n in (3, 17, 40)]
    encoding = TextEncoding(None, None, lambda texts: [documents[int(t)] for t in texts], 12, input_suffix=[1])
    examples, tokens = document_examples(model, encoding, ["0", "1", "2"])
    assert tokens == sum(len(d) + 1 for d in documents)  # each document's tokens and its EOS
    together, scored = total_nll(model, examples, batch_size=8, device=torch.device("cpu"))
    alone = sum(total_nll(model, [example], 1, torch.device("cpu"))[0] for example in examples)
    assert scored == tokens and together == pytest.approx(alone, rel=1e-5)


def test_consecutive_pairs_with_one_source_are_one_example_with_several_references():
    pairs = [("a", "x"), ("a", "y"), ("b", "z"), ("a", "w")]
    expected = [Example("a", ["x", "y"], pairs=[0, 1]), Example("b", ["z"], pairs=[2]), Example("a", ["w"], pairs=[3])]
    assert group_pairs(pairs) == expected


def test_word_perplexity_is_the_exponent_of_the_nll_per_word():
    assert word_perplexity(12.0, 4) == pytest.approx(math.exp(3.0))
    assert word_perplexity(1.0, 0) == math.inf
