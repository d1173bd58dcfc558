"""Text metrics for seq2seq outputs: ROUGE-1/2/L (Google's rouge-score), BLEU and chrF (sacrebleu).

Every score is on a 0-100 scale, higher is better but for TER (an edit rate). ROUGE is
the mean over examples of the per-example F-measure; BLEU, chrF and TER are sacrebleu's
corpus scores with its defaults, so the numbers equal what the two libraries report
themselves; exact match is the share of outputs equal to their reference.

`rot5_preprocessing` applies ROT5's normalisation before ROUGE (SEEDS.md section 2):
lowercase, alphabetic tokens only, English stopwords dropped, words lemmatised.
NLTK's stopword list is bundled below (the NLTK corpus cannot be downloaded
offline); lemmatisation uses NLTK's WordNet lemmatiser when its data is installed,
and otherwise falls back to the Porter stemmer, with a warning.
"""

import functools
import logging
import re

import sacrebleu
from rouge_score import rouge_scorer

from encdec.errors import DataError

log = logging.getLogger(__name__)

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")  # rougeLsum: summary-level LCS over "\n"-split sentences

# NLTK's English stopword list (nltk.corpus.stopwords.words("english"), 179 words)
STOPWORDS = frozenset(
    """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this
that that'll these those am is are was were be been being have has had having do does did doing a an the and but
if or because as until while of at by for with about against between into through during before after above
below to from up down in out on off over under again further then once here there when where why how all any both
each few more most other some such no nor not only own same so than too very s t can will just don don't should
should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't
haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't
weren weren't won won't wouldn wouldn't
""".split()
)


def check_pairs(predictions: list[str], references: list[str]) -> None:
    if len(predictions) != len(references):
        raise DataError(f"{len(predictions)} predictions but {len(references)} references; they must pair up")
    if not predictions:
        raise DataError("there are no predictions to score")


@functools.cache
def lemmatizer():
    """word -> lemma: WordNet's when its data is present, else the Porter stem (logged once)."""
    try:
        from nltk.stem import WordNetLemmatizer

        wordnet = WordNetLemmatizer()
        wordnet.lemmatize("tests")  # raises LookupError without the WordNet data
        return wordnet.lemmatize
    except LookupError:
        from nltk.stem.porter import PorterStemmer

        log.warning("NLTK's WordNet data is not installed; ROT5 preprocessing stems with Porter instead of lemmatising")
        return PorterStemmer().stem


def rot5_preprocess(text: str) -> str:
    """Lowercase, keep alphabetic tokens, drop stopwords, lemmatise (ROT5's ROUGE normalisation)."""
    lemma = lemmatizer()
    words = re.findall(r"[a-z]+", text.lower())
    return " ".join(lemma(word) for word in words if word not in STOPWORDS)


def rouge(
    predictions: list[str], references: list[str], rot5_preprocessing: bool = False, use_stemmer: bool = False
) -> dict[str, float]:
    """Mean ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F-measures (x100) of paired strings (ROUGE-Lsum
    equals ROUGE-L where neither text holds a newline)."""
    check_pairs(predictions, references)
    if rot5_preprocessing:
        predictions = [rot5_preprocess(text) for text in predictions]
        references = [rot5_preprocess(text) for text in references]
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for prediction, reference in zip(predictions, references):
        scores = scorer.score(reference, prediction)  # rouge-score takes (target, prediction)
        for key in ROUGE_TYPES:
            totals[key] += scores[key].fmeasure
    return {key: 100 * total / len(predictions) for key, total in totals.items()}


def bleu(predictions: list[str], references: list[str]) -> float:
    """sacrebleu's corpus BLEU (13a tokenisation, one reference per prediction)."""
    check_pairs(predictions, references)
    return sacrebleu.corpus_bleu(predictions, [references]).score


def chrf(predictions: list[str], references: list[str]) -> float:
    """sacrebleu's corpus chrF (character 6-grams, beta 2)."""
    check_pairs(predictions, references)
    return sacrebleu.corpus_chrf(predictions, [references]).score


def ter(predictions: list[str], references: list[str]) -> float:
    """sacrebleu's corpus TER: edits per reference word (x100), lower is better."""
    check_pairs(predictions, references)
    return sacrebleu.corpus_ter(predictions, [references]).score


def exact_match(predictions: list[str], references: list[str]) -> float:
    """The share (x100) of predictions equal to their reference, outer white space aside."""
    check_pairs(predictions, references)
    return 100 * sum(p.strip() == r.strip() for p, r in zip(predictions, references)) / len(predictions)


def score_texts(predictions: list[str], references: list[str], rot5_preprocessing: bool = False) -> dict[str, float]:
    """Every metric at once: rouge1, rouge2, rougeL, rougeLsum, bleu, chrf, ter (lower is better), exact_match."""
    return {
        **rouge(predictions, references, rot5_preprocessing),
        "bleu": bleu(predictions, references),
        "chrf": chrf(predictions, references),
        "ter": ter(predictions, references),
        "exact_match": exact_match(predictions, references),
    }
