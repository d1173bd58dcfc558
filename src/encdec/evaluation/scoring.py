"""One evaluation of a model on examples: its loss, its generated outputs scored, beside trivial baselines.

`encdec evaluate` calls these whatever it scores, so a run's own validation split and a test
file (`--data`) are measured alike:

    generated_scores  outputs generated for examples and scored against their references
                      (encdec.evaluation.text_metrics), beside each input's first sentence copied
    evaluate_pairs    a pair file: the loss of every reference given its source, then generated_scores
    evaluate_recordings  a speech file: the loss of every transcript given its recording, then generated_scores
    evaluate_documents  a text file: the loss of every token, per token and per word, and with
                      `samples` the first documents continued as UL2's S-denoiser splits them

Perplexity per word is exp(total NLL / whitespace-separated words), the word-level perplexity of
WikiText-style evaluations: it divides the same total by a count that no tokenizer changes, so it
compares models with different vocabularies (the NLL includes each document's closing EOS, so it is
the cost of the text and of its ends). Several references of one source (consecutive pairs with
the same source, as `--target-list each` makes them) are one example: one output, scored against
them all; the loss still scores every pair.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from encdec.data.objectives.transcribe import TranscribeObjective, tokenize_transcripts, transcription_prompt
from encdec.evaluation.baselines import lead_scores, uniform_loss
from encdec.evaluation.encoding import TextEncoding
from encdec.evaluation.generated import generate_texts
from encdec.evaluation.likelihood import NLL, file_nll
from encdec.evaluation.report import perplexity, write_predictions, write_report
from encdec.evaluation.text_metrics import rot5_lemmas, score_texts, scored_texts
from encdec.models.loss import cross_entropy


@dataclass
class Example:
    """An input, its references and the output generated for it."""

    source: str
    references: list[str]
    prediction: str = ""
    pairs: list[int] = field(default_factory=list)  # a test file's: its pairs' places in the file, from 0


@dataclass
class Evaluation:
    """Scores, their trivial baselines, the examples generated and what was measured, in words."""

    scores: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)
    examples: list[Example] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)  # pairs, tokens, words, ..., the ROUGE lemmas
    notes: list[str] = field(default_factory=list)  # one line each: how the numbers were made


def group_pairs(pairs: list[tuple[str, str]]) -> list[Example]:
    """Consecutive pairs with the same source as one example with several references."""
    examples: list[Example] = []
    for number, (source, target) in enumerate(pairs):
        if examples and examples[-1].source == source:
            examples[-1].references.append(target)
            examples[-1].pairs.append(number)
        else:
            examples.append(Example(source, [target], pairs=[number]))
    return examples


def generated_scores(
    model: nn.Module,
    text,
    examples: list[Example],
    batch_size: int = 32,
    rot5_preprocessing: bool = False,
    lead: bool = True,
    progress: bool = False,
    **options: Any,
) -> Evaluation:
    """Generate an output for each example (its `prediction` is set) and score them: ROUGE, BLEU, chrF, TER,
    exact match, and with `lead` the same scores of each input's first sentence copied (no use for a
    language model's inputs, cut mid-sentence). `options` go to encdec.generate."""
    if not examples:
        return Evaluation()
    inputs, references = [e.source for e in examples], [e.references for e in examples]
    generated = generate_texts(model, text, inputs, batch_size, progress=progress, **options)
    for example, prediction in zip(examples, generated.predictions):
        example.prediction = prediction
    scores, signatures = scored_texts(generated.predictions, references, rot5_preprocessing)
    evaluation = Evaluation(scores, examples=examples)
    evaluation.counts["sacrebleu_signatures"] = signatures  # how BLEU, chrF and TER were computed
    evaluation.notes.append(f"BLEU signature: {signatures['bleu']}")
    if lead:
        evaluation.baseline = lead_scores(inputs, references, rot5_preprocessing)
    if rot5_preprocessing:  # which lemmas produced the ROUGE figures: WordNet's (ROT5's) or Porter's stems
        evaluation.counts["rouge_rot5_lemmas"] = rot5_lemmas()
        evaluation.notes.append(f"ROUGE after ROT5's preprocessing, lemmatised by {LEMMAS[rot5_lemmas()]}")
    rate = generated.new_tokens / generated.seconds if generated.seconds else 0.0
    evaluation.notes.append(
        f"generated {generated.new_tokens:,} tokens for {len(examples):,} inputs in {generated.seconds:.1f} s: "
        f"{rate:.1f} tokens/s"
    )
    return evaluation


def loss_scores(nll: NLL, vocab_size: int, prefix: str) -> tuple[dict[str, float], dict[str, float]]:
    """{prefix_loss, prefix_perplexity} of a summed NLL, and those of a uniform guess over the vocabulary."""
    uniform = uniform_loss(vocab_size)
    scores = {f"{prefix}_loss": nll.mean, f"{prefix}_perplexity": perplexity(nll.mean)}
    return scores, {f"{prefix}_loss": uniform["val_loss"], f"{prefix}_perplexity": uniform["val_perplexity"]}


def evaluate_pairs(
    model: nn.Module,
    encoding: TextEncoding,
    pairs: list[tuple[str, str]],
    samples: int | None = None,
    batch_size: int = 32,
    device="cpu",
    rot5_preprocessing: bool = False,
    progress: bool = False,
    prefix: str = "test",
    **options: Any,
) -> Evaluation:
    """The loss per reference token over every pair, then the first `samples` examples (None: all) generated
    and scored (generated_scores)."""
    nll = file_nll(model, encoding, pairs, batch_size, device, progress)
    grouped = group_pairs(pairs)
    evaluation = generated_scores(
        model, encoding.text, grouped[:samples], batch_size, rot5_preprocessing, True, progress, **options
    )
    scores, baseline = loss_scores(nll, model.config.vocab_size, prefix)
    evaluation.scores, evaluation.baseline = scores | evaluation.scores, baseline | evaluation.baseline
    evaluation.counts = {
        "pairs": len(pairs),
        "inputs": len(grouped),
        "reference_tokens": nll.tokens,
    } | evaluation.counts
    cut = f"; {nll.cut:,} references cut to the model's {model.config.positions.max:,} positions" if nll.cut else ""
    evaluation.notes.insert(0, f"loss over all {len(pairs):,} pairs: {nll.tokens:,} reference tokens{cut}")
    return evaluation


def evaluate_recordings(
    model: nn.Module,
    text,
    tokenizer,
    pairs: list[tuple[str, str]],
    samples: int | None = None,
    batch_size: int = 32,
    device="cpu",
    progress: bool = False,
    prefix: str = "test",
    language: str | None = None,
    task: str = "transcribe",
    **options: Any,
) -> Evaluation:
    """A speech model on (recording, transcript) pairs: the loss per transcript token over every pair, teacher-forced
    from the prompt its training used (data.objectives.transcribe: <|startoftranscript|>, the language and task
    where given, <|notimestamps|>), then the first `samples` (None: all) transcribed and scored (WER, CER, ...)
    beside an empty transcript's scores, the trivial floor of a recognizer (every reference word deleted)."""
    nll = transcription_nll(model, tokenizer, pairs, batch_size, device, progress, language, task)
    examples = group_pairs(pairs)[:samples]
    evaluation = generated_scores(model, text, examples, batch_size, lead=False, progress=progress, **options)
    if examples:
        evaluation.baseline = score_texts([""] * len(examples), [e.references for e in examples])
    scores, baseline = loss_scores(nll, model.config.vocab_size, prefix)
    evaluation.scores, evaluation.baseline = scores | evaluation.scores, baseline | evaluation.baseline
    evaluation.counts = {"recordings": len(pairs), "reference_tokens": nll.tokens} | evaluation.counts
    evaluation.notes.insert(0, f"loss over all {len(pairs):,} recordings: {nll.tokens:,} transcript tokens")
    evaluation.notes.insert(1, "baseline: an empty transcript for every recording")
    return evaluation


def transcription_nll(
    model: nn.Module,
    tokenizer,
    pairs: list[tuple[str, str]],
    batch_size: int,
    device,
    progress: bool = False,
    language: str | None = None,
    task: str = "transcribe",
) -> NLL:
    """The summed loss of every transcript given its recording, batched as the transcription objective batches
    them (in order, its features of the model's bins and window)."""
    audio = model.config.audio
    start, prompt = transcription_prompt(tokenizer, language, task)
    recordings, transcripts = tokenize_transcripts(tokenizer, pairs)
    objective = TranscribeObjective(
        recordings,
        transcripts,
        batch_size,
        tokenizer.pad_id,
        tokenizer.eos_id,
        start,
        prompt,
        model.config.positions.max,
        audio.n_mels,
        2 * audio.max_source_positions,
        shuffle=False,
    )
    total, tokens = torch.zeros((), device=device), 0
    model.eval()
    steps = range(objective.batches_per_epoch)
    for step in tqdm(steps, desc="loss", unit="batch", leave=False, disable=not progress):
        batch = objective.batch_at(0, step)
        local = batch.to(device)
        with torch.no_grad():
            logits = model(local.src_ids, local.tgt_ids).logits
        total += cross_entropy(logits, local.labels) * batch.num_tokens  # counted on the host batch: no sync
        tokens += batch.num_tokens
    return NLL(total.item(), tokens, 0)  # one host sync, at the end


def evaluate_documents(
    model: nn.Module,
    encoding: TextEncoding,
    documents: list[str],
    samples: int | None = None,
    batch_size: int = 32,
    device="cpu",
    progress: bool = False,
    prefix: str = "test",
    rot5_preprocessing: bool = False,
    **options: Any,
) -> Evaluation:
    """The loss per token and per word over every document, then `samples` examples (None: none) continued from
    the first half of a window of the documents (continuation_splits) and scored."""
    nll = file_nll(model, encoding, documents, batch_size, device, progress)
    words = sum(len(document.split()) for document in documents)
    examples = continuation_examples(encoding, documents, samples) if samples else []
    evaluation = generated_scores(
        model, encoding.text, examples, batch_size, rot5_preprocessing, lead=False, progress=progress, **options
    )
    scores, baseline = loss_scores(nll, model.config.vocab_size, prefix)
    scores[f"{prefix}_word_perplexity"] = word_perplexity(nll.total, words)
    baseline[f"{prefix}_word_perplexity"] = word_perplexity(nll.tokens * math.log(model.config.vocab_size), words)
    evaluation.scores, evaluation.baseline = scores | evaluation.scores, baseline | evaluation.baseline
    evaluation.counts = {"documents": len(documents), "tokens": nll.tokens, "words": words} | evaluation.counts
    evaluation.notes.insert(
        0,
        f"loss over all {len(documents):,} documents: {nll.tokens:,} tokens (each document's EOS among them), "
        f"{words:,} words ({nll.tokens / max(words, 1):.2f} tokens a word)",
    )
    return evaluation


def word_perplexity(total_nll: float, words: int) -> float:
    """exp(total NLL / words); inf when it overflows or there are no words."""
    return perplexity(total_nll / words) if words else math.inf


def continuation_examples(encoding: TextEncoding, documents: list[str], n: int) -> list[Example]:
    """Up to `n` examples continuing the documents from windows of source_length tokens (continuation_splits)."""
    decode = encoding.text.decode
    documents = continuation_texts(documents, encoding.source_length, n)
    ids = encoding.encode_documents(documents) if documents else []
    return [
        Example(decode(source, skip_special_tokens=True), [decode(target, skip_special_tokens=True)])
        for source, target in continuation_splits(ids, encoding.source_length, n)
    ]


LEMMAS = {
    "wordnet": "NLTK's WordNet lemmatiser (as ROT5)",
    "porter": "the Porter stemmer (NLTK's WordNet data is not installed; ROT5 used WordNet's lemmas)",
}
CHARS_A_TOKEN = 16  # a document is cut to n windows of this many characters a token before it is encoded


def continuation_texts(texts: list[str], length: int, n: int) -> list[str]:
    """The first `n` texts, each cut to what n windows of `length` tokens can hold (CHARS_A_TOKEN characters a
    token), so a long running text is not encoded whole for a few examples."""
    return [text[: n * length * CHARS_A_TOKEN] for text in texts[:n]]


def continuation_splits(documents: list[list[int]], length: int, n: int) -> list[tuple[list[int], list[int]]]:
    """(input, reference) token ids of up to `n` examples: windows of `length` tokens of the documents, every
    document's first window, then their second windows, and so on, so that one running text (a file without
    document separators) still gives n examples; each split as UL2's S-denoiser splits a chunk (the first
    max(w // 2, 2) tokens the input, the rest the reference), windows too short for a reference left out."""
    splits: list[tuple[list[int], list[int]]] = []
    for start in range(0, max((len(ids) for ids in documents), default=0), length):
        for ids in documents:
            window = ids[start : start + length]
            cut = max(len(window) // 2, 2)
            if len(window) > cut:
                splits.append((window[:cut], window[cut:]))
            if len(splits) == n:
                return splits
    return splits


REPORT_FILES = ("eval.json", "eval.md", "predictions.jsonl")  # what write_evaluation writes into its directory


def write_evaluation(directory: Path, evaluation: Evaluation, about: dict | None = None) -> list[Path]:
    """eval.json, eval.md and predictions.jsonl in `directory` (encdec.evaluation.report); their paths.
    `about` (what was scored) joins the counts in eval.json."""
    inputs = [e.source for e in evaluation.examples]
    predictions = [e.prediction for e in evaluation.examples]
    references = [e.references[0] if len(e.references) == 1 else e.references for e in evaluation.examples]
    places = [e.pairs for e in evaluation.examples] if any(e.pairs for e in evaluation.examples) else None
    about = (about or {}) | evaluation.counts
    json_path, md_path = write_report(
        directory, evaluation.scores, inputs, predictions, references, evaluation.baseline, about, evaluation.notes
    )
    return [json_path, md_path, write_predictions(directory / REPORT_FILES[2], inputs, predictions, references, places)]
