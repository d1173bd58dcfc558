"""Our metrics equal rouge-score's and sacrebleu's own numbers on fixed strings."""

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from encdec.errors import DataError
from encdec.evaluation import bleu, cer, chrf, exact_match, rot5_preprocess, rouge, score_texts, ter, wer
from encdec.evaluation.text_metrics import rot5_lemmas

PREDICTIONS = [
    "Sara and Ben played by the old oak tree and did not quit.",
    "The cat slept in the warm sun all day.",
    "Tom found a shiny lamp.",
]
REFERENCES = [
    "Sara and Ben play by an oak tree and do not quit.",
    "A cat naps in the sun.",
    "Tom had a shiny lamp and he loved it.",
]


def test_rouge_is_the_mean_of_rouge_scores_own_f_measures():
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"])
    expected = {key: 0.0 for key in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    for prediction, reference in zip(PREDICTIONS, REFERENCES):
        for key, score in scorer.score(reference, prediction).items():
            expected[key] += 100 * score.fmeasure / 3
    assert rouge(PREDICTIONS, REFERENCES) == pytest.approx(expected, abs=1e-9)


def test_bleu_and_chrf_equal_sacrebleus_corpus_scores():
    assert bleu(PREDICTIONS, REFERENCES) == pytest.approx(sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES]).score)
    assert chrf(PREDICTIONS, REFERENCES) == pytest.approx(sacrebleu.corpus_chrf(PREDICTIONS, [REFERENCES]).score)
    assert ter(PREDICTIONS, REFERENCES) == pytest.approx(sacrebleu.corpus_ter(PREDICTIONS, [REFERENCES]).score)


def test_rouge_lsum_scores_newline_split_sentences_as_rouge_score_does():
    prediction, reference = "the cat sat.\nthe dog ran.", "the dog ran.\nthe cat sat."
    expected = rouge_scorer.RougeScorer(["rougeLsum"]).score(reference, prediction)["rougeLsum"].fmeasure
    scores = rouge([prediction], [reference])
    assert scores["rougeLsum"] == pytest.approx(100 * expected) and scores["rougeLsum"] > scores["rougeL"]


def test_exact_match_counts_outputs_equal_to_their_reference():
    assert exact_match(
        [" Ein Hund. ", "Ein Hund.", "ein Hund."], ["Ein Hund.", "Ein Hund", "Ein Hund."]
    ) == pytest.approx(100 / 3)


def test_identical_texts_score_100_everywhere():
    scores = score_texts(REFERENCES, REFERENCES)
    assert scores == pytest.approx(
        dict(
            rouge1=100, rouge2=100, rougeL=100, rougeLsum=100, bleu=100, chrf=100, ter=0, wer=0, cer=0, exact_match=100
        )
    )


def test_rot5_preprocessing_lowercases_keeps_letters_and_drops_stopwords():
    text = rot5_preprocess("The 2 Cats were sitting, happily, on THE mat!")
    assert "the" not in text.split() and "2" not in text and "," not in text
    assert text.split()[0].startswith("cat") and text == text.lower()


def test_rot5_preprocessing_makes_inflections_match():
    plain = rouge(["the cats sat"], ["a cat sits"])["rouge1"]
    normalised = rouge(["the cats sat"], ["a cat sits"], rot5_preprocessing=True)["rouge1"]
    assert normalised > plain


def test_unpaired_inputs_are_one_clear_error():
    with pytest.raises(DataError, match="2 predictions but 1 references"):
        bleu(["a", "b"], ["a"])


def test_a_report_writes_json_scores_and_a_markdown_table_with_samples(tmp_path):
    import json

    from encdec.evaluation.report import perplexity, write_report

    scores = {"loss": 2.0, "perplexity": perplexity(2.0), **score_texts(PREDICTIONS, REFERENCES)}
    json_path, md_path = write_report(tmp_path, scores, ["in | 1", "in 2", "in 3"], PREDICTIONS, REFERENCES)
    saved = json.loads(json_path.read_text())
    assert saved["scores"]["perplexity"] == pytest.approx(7.389056, rel=1e-6)
    assert saved["samples"][1] == {"input": "in 2", "output": PREDICTIONS[1], "reference": REFERENCES[1]}
    text = md_path.read_text()
    assert "| rougeL |" in text and "| in \\| 1 |" in text


def test_the_report_sets_each_score_beside_its_trivial_baseline_and_says_how_to_read_it(tmp_path):
    import json

    from encdec.evaluation.baselines import lead_scores, uniform_loss
    from encdec.evaluation.report import write_report

    inputs = ["The cat sat on the mat. It was warm there.", "Mr. Smith went home. He slept."]
    references = ["The cat sat on the mat.", "Mr. Smith went home to sleep."]
    baseline = uniform_loss(100) | lead_scores(inputs, references)
    assert baseline["val_perplexity"] == 100 and baseline["val_loss"] == pytest.approx(4.60517, rel=1e-5)
    assert baseline["rouge1"] == pytest.approx(100 * (1 + 2 * 4 / 10) / 2)  # lead-1 is the first reference exactly
    scores = {"val_loss": 2.0, **score_texts(references, references)}
    json_path, md_path = write_report(tmp_path, scores, inputs, references, references, baseline)
    assert json.loads(json_path.read_text())["baseline"] == baseline
    text = md_path.read_text()
    assert "| metric | value | trivial baseline |" in text and "| val_loss | 2.0000 | 4.6052 |" in text
    assert "each input's first sentence copied as the output" in text


@pytest.mark.parametrize(
    "text, first",
    [
        ("#Person1#: Hi, Mr. Smith. I'm Doctor Hawkins. Why?", "#Person1#: Hi, Mr. Smith."),
        ('He said "Go!" Then he left.', 'He said "Go!"'),
        ("J. R. Smith went home. Then", "J. R. Smith went home."),
        ("no sentence end", "no sentence end"),
        ("\n\nline one\nline two. More.", "line one"),
    ],
)
def test_first_sentence_skips_abbreviations_and_initials(text, first):
    from encdec.evaluation.baselines import first_sentence

    assert first_sentence(text) == first


def test_a_long_sample_shows_its_start_and_its_end():
    from encdec.evaluation.report import cell

    text = "start " + "middle " * 100 + "the very end"
    shown = cell(text)
    assert len(shown) <= 200 and shown.startswith("start middle") and shown.endswith("the very end")
    assert "[...]" in shown and cell("short | text") == "short \\| text"


def test_rot5_lemmas_name_what_the_preprocessing_did():
    assert rot5_preprocess("studies") == {"wordnet": "study", "porter": "studi"}[rot5_lemmas()]


def test_wer_and_cer_are_jiwer_s_corpus_rates():
    import jiwer

    references, predictions = ["a dog runs in the snow", "two men sit"], ["a dog ran in snow", "two men sit down"]
    assert wer(predictions, references) == pytest.approx(100 * jiwer.wer(references, predictions))
    assert cer(predictions, references) == pytest.approx(100 * jiwer.cer(references, predictions))
    # by hand: "ran" for "runs" and "the" dropped (2 of 6 words), "down" added (1 of 3): 3 edits in 9 words
    assert wer(predictions, references) == pytest.approx(100 * 3 / 9)


def test_wer_against_several_references_takes_each_prediction_s_closest():
    references = [["a cat sleeps", "the cat is asleep"], ["one dog"]]
    assert wer(["the cat is asleep", "one dog"], references) == 0
    assert wer(["a cat sleeps now", "one dog"], references) == pytest.approx(100 * 1 / 5)


def test_an_error_rate_over_references_without_words_is_one_sentence():
    with pytest.raises(DataError, match="hold no words"):
        wer(["something"], [" "])
