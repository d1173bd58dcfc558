"""Pair scores (encdec.evaluation.pair_scores): each target's log-probabilities under teacher forcing, whose mean
over every token is the model's own loss, batched or one by one alike, normalised as declared."""

import math

import pytest
import torch
from hf_kit import word_level_t5

from encdec.errors import ConfigError
from encdec.evaluation.encoding import opened_encoding
from encdec.evaluation.likelihood import collate, pair_examples
from encdec.evaluation.pair_scores import ScoreOptions, score_pairs
from encdec.runs.open import open_model
from encdec.schema import read

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was a little girl named lily she liked to play".split()
PAIRS = [
    ("once upon a time", "there was a little girl"),
    ("lily liked to play", "she"),
    ("a girl named lily", "once upon a time there was lily"),
    ("she liked", "to play a little"),
]


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    return open_model(word_level_t5(tmp_path_factory.mktemp("t5"), WORDS, close_with_eos=True))


def test_the_mean_token_nll_of_the_pairs_is_the_model_s_own_loss_with_labels(opened):
    scores = score_pairs(opened, PAIRS, batch_size=3)
    examples, _ = pair_examples(opened.model, opened_encoding(opened), PAIRS)
    batch = collate(opened.model)(examples)
    with torch.no_grad():
        loss = opened.model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, labels=batch.labels).ce_loss
    tokens = sum(len(s.token_ids) for s in scores)
    assert tokens == batch.num_tokens
    assert -sum(s.total for s in scores) / tokens == pytest.approx(loss.item(), rel=1e-5)
    assert [s.token_ids for s in scores] == [target.tolist() for _, target in examples]
    assert all(s.token_ids[-1] == 1 for s in scores)  # each target closed by its EOS, as training tokenises it


def test_a_batch_scores_what_its_pairs_score_one_by_one(opened):
    together = score_pairs(opened, PAIRS, batch_size=4)
    for pair, batched in zip(PAIRS, together):
        alone = score_pairs(opened, [pair])[0]
        assert alone.token_ids == batched.token_ids
        assert alone.token_logprobs == pytest.approx(batched.token_logprobs, abs=1e-5)


def test_the_normalisations_divide_the_total_as_declared(opened):
    total = score_pairs(opened, PAIRS[:1], ScoreOptions("sum"))[0]
    tokens = len(total.token_ids)
    assert total.score == pytest.approx(sum(total.token_logprobs)) == pytest.approx(total.total)
    assert score_pairs(opened, PAIRS[:1], ScoreOptions("mean"))[0].score == pytest.approx(total.total / tokens)
    gnmt = score_pairs(opened, PAIRS[:1], ScoreOptions("gnmt", alpha=1.0))[0].score
    assert gnmt == pytest.approx(total.total / ((5 + tokens) / 6))
    default = score_pairs(opened, PAIRS[:1], ScoreOptions("gnmt"))[0].score
    assert default == pytest.approx(total.total / ((5 + tokens) / 6) ** 0.6)
    assert all(p <= 0 and math.isfinite(p) for p in total.token_logprobs)


@pytest.mark.parametrize(
    "values, says",
    [
        ({"normalise": "median"}, "normalise"),
        ({"normalise": "mean", "alpha": 0.6}, "gnmt's length penalty"),
        ({"normalise": "gnmt", "alpha": -1}, "alpha"),
        ({"normalise": "gnmt", "alpha": "0.6"}, "alpha"),
        ({"length": 3}, "length"),
    ],
)
def test_bad_score_options_are_one_sentence(values, says):
    with pytest.raises(ConfigError, match=says):
        read(ScoreOptions, values)


def test_no_pairs_score_nothing(opened):
    assert score_pairs(opened, []) == []


def test_a_target_whose_logits_pass_one_forward_s_bound_is_one_sentence(opened, monkeypatch):
    from encdec.errors import DataError
    from encdec.evaluation import pair_scores

    monkeypatch.setattr(pair_scores, "MAX_LOGITS", len(WORDS) * 3)  # three tokens' logits
    assert len(score_pairs(opened, [PAIRS[1]])[0].token_ids) == 2  # "she" and EOS fit
    with pytest.raises(DataError, match="pair 0's target holds 6 tokens"):
        score_pairs(opened, PAIRS[:1])
