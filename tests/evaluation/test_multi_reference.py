"""Several references per prediction: BLEU, chrF and TER as sacrebleu takes reference streams, ROUGE the best one's."""

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from encdec.errors import DataError
from encdec.evaluation import score_texts
from encdec.evaluation.text_metrics import reference_streams, rouge

PREDICTIONS = ["A man rides a bike.", "Two dogs play in the snow.", "A girl reads."]
REFERENCES = [
    ["A man is riding a bicycle.", "A man rides his bike down the street."],
    ["Two dogs are playing in snow."],
    ["A young girl is reading a book.", "A girl reads a book.", "The girl reads."],
]


def test_reference_streams_pad_with_none_where_an_example_has_fewer():
    streams = reference_streams(REFERENCES)
    assert len(streams) == 3 and streams[1] == [REFERENCES[0][1], None, REFERENCES[2][1]]


def test_bleu_chrf_and_ter_take_every_reference_as_sacrebleu_does():
    scores = score_texts(PREDICTIONS, REFERENCES)
    streams = [[refs[k] if k < len(refs) else None for refs in REFERENCES] for k in range(3)]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(PREDICTIONS, streams).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(PREDICTIONS, streams).score)
    assert scores["ter"] == pytest.approx(sacrebleu.corpus_ter(PREDICTIONS, streams).score)
    single = score_texts(PREDICTIONS, [refs[0] for refs in REFERENCES])
    assert scores["bleu"] > single["bleu"]  # a second reference can only add matches


def test_rouge_takes_the_best_reference_and_exact_match_any():
    scorer = rouge_scorer.RougeScorer(["rouge1"])
    expected = sum(scorer.score_multi(refs, p)["rouge1"].fmeasure for p, refs in zip(PREDICTIONS, REFERENCES))
    assert rouge(PREDICTIONS, REFERENCES)["rouge1"] == pytest.approx(100 * expected / 3)
    assert score_texts(["The girl reads."], [REFERENCES[2]])["exact_match"] == 100


def test_an_empty_list_of_references_is_one_sentence():
    with pytest.raises(DataError, match="empty list of references"):
        score_texts(["a"], [[]])
