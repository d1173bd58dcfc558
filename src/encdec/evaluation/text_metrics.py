"""Text metrics for seq2seq outputs: ROUGE-1/2/L/Lsum (Google's rouge-score), BLEU, chrF and TER (sacrebleu),
word and character error rates (jiwer: WER, CER).

Every score is on a 0-100 scale, higher is better but for TER, WER and CER (edit rates). ROUGE is
the mean over examples of the per-example F-measure; BLEU, chrF and TER are sacrebleu's
corpus scores with its defaults, so the numbers equal what the two libraries report
themselves; exact match is the share of outputs equal to their reference.

A reference is a text, or a list of texts where an input has several (a test set's
several translations or summaries): BLEU, chrF and TER then take them all as sacrebleu
takes multiple references (reference streams, None where an example has fewer), ROUGE
takes the best-matching one (rouge-score's `score_multi`), WER and CER the one with the lowest error rate, and
exact match any of them. WER and CER are corpus rates, as jiwer computes them over a list: every prediction's
edits over every reference's words (characters), on the texts as given (no case or punctuation folding).

`rot5_preprocessing` applies ROT5's normalisation before ROUGE (SEEDS.md section 2):
lowercase, alphabetic tokens only, English stopwords dropped, words lemmatised.
NLTK's stopword list is bundled below (the NLTK corpus cannot be downloaded
offline); lemmatisation uses NLTK's WordNet lemmatiser when its data is installed,
and otherwise falls back to the Porter stemmer, with a warning, and every report that
used it says which (`rot5_lemmas`).
"""

import functools
import logging
import re
from collections.abc import Callable

import jiwer
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU, CHRF, TER

from encdec.errors import DataError

log = logging.getLogger(__name__)

ERROR_RATES = ("ter", "wer", "cer")  # the scores where lower is better
SACREBLEU = {"bleu": BLEU, "chrf": CHRF, "ter": TER}  # sacrebleu's defaults: 13a, exp smoothing; 6-grams, beta 2
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


References = list[str] | list[list[str]]  # one text per prediction, or a list of texts each


def check_pairs(predictions: list[str], references: References) -> None:
    if len(predictions) != len(references):
        raise DataError(f"{len(predictions)} predictions but {len(references)} references; they must pair up")
    if not predictions:
        raise DataError("there are no predictions to score")
    if any(not isinstance(r, str) and not r for r in references):
        raise DataError("a prediction has an empty list of references; give each at least one")


def reference_lists(references: References) -> list[list[str]]:
    """Each prediction's references as a list of texts."""
    return [[r] if isinstance(r, str) else list(r) for r in references]


def reference_streams(references: References) -> list[list[str | None]]:
    """sacrebleu's layout: stream k holds each prediction's k-th reference, None where it has fewer."""
    lists = reference_lists(references)
    width = max(len(refs) for refs in lists)
    return [[refs[k] if k < len(refs) else None for refs in lists] for k in range(width)]


@functools.cache
def lemmatizer() -> tuple[str, Callable[[str], str]]:
    """(name, word -> lemma): ("wordnet", WordNet's lemmatiser) when NLTK's WordNet data is present, else
    ("porter", the Porter stemmer: logged once). No package index carries the WordNet data (NLTK downloads it
    from GitHub), so every report that used ROT5's preprocessing names the one it had (`rot5_lemmas`)."""
    try:
        from nltk.stem import WordNetLemmatizer

        wordnet = WordNetLemmatizer()
        wordnet.lemmatize("tests")  # raises LookupError without the WordNet data
        return "wordnet", wordnet.lemmatize
    except LookupError:
        from nltk.stem.porter import PorterStemmer

        log.warning("NLTK's WordNet data is not installed; ROT5 preprocessing stems with Porter instead of lemmatising")
        return "porter", PorterStemmer().stem


def rot5_lemmas() -> str:
    """Which lemmas ROT5's preprocessing takes here: "wordnet" (ROT5's own) or "porter" (without WordNet's data)."""
    return lemmatizer()[0]


def rot5_preprocess(text: str) -> str:
    """Lowercase, keep alphabetic tokens, drop stopwords, lemmatise (ROT5's ROUGE normalisation)."""
    lemma = lemmatizer()[1]
    words = re.findall(r"[a-z]+", text.lower())
    return " ".join(lemma(word) for word in words if word not in STOPWORDS)


def rouge(
    predictions: list[str], references: References, rot5_preprocessing: bool = False, use_stemmer: bool = False
) -> dict[str, float]:
    """Mean ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F-measures (x100) of paired strings (ROUGE-Lsum
    equals ROUGE-L where neither text holds a newline); against several references, the best one's."""
    check_pairs(predictions, references)
    lists = reference_lists(references)
    if rot5_preprocessing:
        predictions = [rot5_preprocess(text) for text in predictions]
        lists = [[rot5_preprocess(text) for text in refs] for refs in lists]
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for prediction, refs in zip(predictions, lists):
        # rouge-score takes (target, prediction); score_multi keeps each type's best reference
        scores = scorer.score(refs[0], prediction) if len(refs) == 1 else scorer.score_multi(refs, prediction)
        for key in ROUGE_TYPES:
            totals[key] += scores[key].fmeasure
    return {key: 100 * total / len(predictions) for key, total in totals.items()}


def corpus_score(metric: str, predictions: list[str], references: References) -> tuple[float, str]:
    """sacrebleu's corpus `metric` ("bleu", "chrf" or "ter") and its signature, the string that says how it
    was computed (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1), as papers report it."""
    check_pairs(predictions, references)
    scorer = SACREBLEU[metric]()
    score = scorer.corpus_score(predictions, reference_streams(references)).score
    return score, str(scorer.get_signature())


def bleu(predictions: list[str], references: References) -> float:
    """sacrebleu's corpus BLEU (13a tokenisation, every reference of each prediction)."""
    return corpus_score("bleu", predictions, references)[0]


def chrf(predictions: list[str], references: References) -> float:
    """sacrebleu's corpus chrF (character 6-grams, beta 2)."""
    return corpus_score("chrf", predictions, references)[0]


def ter(predictions: list[str], references: References) -> float:
    """sacrebleu's corpus TER: edits per reference word (x100), lower is better."""
    return corpus_score("ter", predictions, references)[0]


def edits(reference: str, prediction: str, unit: str) -> tuple[int, int]:
    """(edits, reference length) of `prediction` against `reference` in words or characters (jiwer's alignment)."""
    out = (jiwer.process_words if unit == "words" else jiwer.process_characters)(reference, prediction)
    return out.substitutions + out.deletions + out.insertions, out.hits + out.substitutions + out.deletions


def error_rate(predictions: list[str], references: References, unit: str = "words") -> float:
    """The corpus edit rate (x100) in `unit` ("words": WER, "characters": CER): all edits over all reference
    words (characters), each prediction against its reference of the lowest rate."""
    check_pairs(predictions, references)
    total = length = 0
    for prediction, refs in zip(predictions, reference_lists(references)):
        found = min((edits(ref, prediction, unit) for ref in refs), key=lambda e: e[0] / max(e[1], 1))
        total, length = total + found[0], length + found[1]
    if length == 0:
        raise DataError(f"the references hold no {unit}, so an error rate in {unit} is undefined")
    return 100 * total / length


def wer(predictions: list[str], references: References) -> float:
    """Word error rate (x100): substitutions, deletions and insertions over reference words (jiwer)."""
    return error_rate(predictions, references, "words")


def cer(predictions: list[str], references: References) -> float:
    """Character error rate (x100), as wer over characters (jiwer)."""
    return error_rate(predictions, references, "characters")


def exact_match(predictions: list[str], references: References) -> float:
    """The share (x100) of predictions equal to their reference (to one of them), outer white space aside."""
    check_pairs(predictions, references)
    lists = reference_lists(references)
    return 100 * sum(p.strip() in {r.strip() for r in refs} for p, refs in zip(predictions, lists)) / len(predictions)


def score_texts(predictions: list[str], references: References, rot5_preprocessing: bool = False) -> dict[str, float]:
    """Every metric at once: rouge1, rouge2, rougeL, rougeLsum, bleu, chrf, ter, wer, cer (the last three lower is
    better), exact_match."""
    return scored_texts(predictions, references, rot5_preprocessing)[0]


def scored_texts(
    predictions: list[str], references: References, rot5_preprocessing: bool = False
) -> tuple[dict[str, float], dict[str, str]]:
    """score_texts' scores and the sacrebleu signature of each of BLEU, chrF and TER."""
    scores, signatures = rouge(predictions, references, rot5_preprocessing), {}
    for metric in SACREBLEU:
        scores[metric], signatures[metric] = corpus_score(metric, predictions, references)
    rates = {"wer": wer(predictions, references), "cer": cer(predictions, references)}
    return scores | rates | {"exact_match": exact_match(predictions, references)}, signatures
