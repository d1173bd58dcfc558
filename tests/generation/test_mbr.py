"""Minimum Bayes risk decoding (generation.mbr): the consensus of the samples kept, as a row of the search table
that `generate` runs; seeded, one choice; each rule that MBR needs one sentence."""

import pytest
import torch

from encdec.errors import ConfigError
from encdec.generation import generate
from encdec.generation.config import GenerationConfig
from encdec.generation.mbr import consensus, expected_utilities
from encdec.generation.strategies import strategy_for

from .helpers import padded_batch, tiny


def words(rows: torch.Tensor) -> list[str]:
    """Token rows as texts, one word a token (the start token and padding dropped): a decoding without a tokenizer."""
    return [" ".join(f"w{t}" for t in row[1:].tolist() if t != 0) for row in rows]


def test_the_text_most_like_the_others_is_chosen():
    texts = ["a dog ran far away", "the cat sat on the mat", "the cat sat on a mat", "a cat sat on the mat"]
    assert consensus(texts) == [1]  # it shares the most with the other two cats
    assert consensus(texts, keep=4)[-1] == 0  # the dog is the outlier
    assert consensus(texts, keep=2, metric="bleu")[0] == 1
    utilities = expected_utilities(["x y z", "x y z", "q"])
    assert utilities[0] == utilities[1] > utilities[2]  # two copies agree with each other
    assert consensus(["x y z", "x y z", "q"]) == [0]  # a tie goes to the earlier sample


def test_mbr_keeps_the_consensus_of_the_samples_the_same_seed_draws():
    model = tiny("t5")
    src, mask = padded_batch(B=2)
    sampling = dict(do_sample=True, top_k=0, seed=3, max_new_tokens=6)
    samples = generate(model, src, mask, num_return_sequences=5, **sampling)  # (10, L) the same draws
    chosen = generate(model, src, mask, mbr=5, mbr_decode=words, **sampling)
    assert chosen.shape[0] == 2
    for example in range(2):
        drawn = words(samples[example * 5 : example * 5 + 5])
        assert words(chosen[example : example + 1]) == [drawn[consensus(drawn)[0]]]
    assert torch.equal(chosen, generate(model, src, mask, mbr=5, mbr_decode=words, **sampling))  # seeded: one choice
    two = generate(model, src, mask, mbr=5, mbr_decode=words, num_return_sequences=2, **sampling)
    assert two.shape[0] == 4 and words(two[0:1]) == words(chosen[0:1])  # best first


def test_mbr_is_a_row_of_the_search_table():
    cfg = GenerationConfig(do_sample=True, mbr=4)
    assert strategy_for(cfg).name == "minimum Bayes risk" and cfg.rows_per_example == 4


@pytest.mark.parametrize(
    "options, says",
    [
        (dict(mbr=4), "do_sample"),
        (dict(mbr=4, do_sample=True, num_return_sequences=5), "cannot exceed mbr"),
        (dict(mbr_metric="bleu"), "give mbr"),
        (dict(mbr=1, do_sample=True), "mbr"),
        (dict(mbr=4, do_sample=True, mbr_metric="ter"), "mbr_metric"),
    ],
)
def test_what_mbr_cannot_do_is_one_sentence(options, says):
    with pytest.raises(ConfigError, match=says):
        GenerationConfig(**options)


def test_mbr_without_a_decoding_of_its_texts_is_refused_before_any_work():
    src, mask = padded_batch(B=1)
    with pytest.raises(ConfigError, match="mbr compares texts"):
        generate(tiny("t5"), src, mask, do_sample=True, mbr=3)
