"""`encdec evaluate MODEL --data FILE`: a Hugging Face directory, a run and its export scored on a test file,
each figure checked against a direct computation (transformers' loss, the model's own forward, sacrebleu)."""

import gzip
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from hf_kit import word_level_t5

from encdec.cli import main
from encdec.runs.load import load_run

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
MULTI30K = SHARED / "translation" / "multi30k"
WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was a little girl named lily she liked to play".split()
METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum", "bleu", "chrf", "ter", "wer", "cer", "exact_match")
PAIRS = [
    ("once upon a time", "there was a little girl"),
    ("lily liked to play", "she was a little girl"),
    ("a girl named lily", "once upon a time there was lily"),
]


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> Path:
    """A random-weight T5 saved with a word-level tokenizer that closes inputs and targets with </s>, as T5's does."""
    return word_level_t5(tmp_path_factory.mktemp("t5"), WORDS, close_with_eos=True)


def multi30k(split: str, count: int) -> list[tuple[str, str]]:
    with gzip.open(MULTI30K / f"{split}.en.gz", "rt") as en, gzip.open(MULTI30K / f"{split}.de.gz", "rt") as de:
        return [(e.strip(), d.strip()) for _, e, d in zip(range(count), en, de)]


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory) -> Path:
    """A Transformer (exportable as Marian) trained two steps on 80 Multi30k pairs, byte tokenizer; test.tsv beside it."""
    root = tmp_path_factory.mktemp("mt")
    (root / "train.tsv").write_text("".join(f"{en}\t{de}\n" for en, de in multi30k("train", 80)))
    (root / "test.tsv").write_text("".join(f"{en}\t{de}\n" for en, de in multi30k("test_2016_flickr", 6)))
    return trained(root, {"format": "tsv", "train": [str(root / "train.tsv")], "val_fraction": 0.1}, steps=2)


def trained(root: Path, data: dict, steps: int) -> Path:
    """root/run: a tiny Transformer with a byte tokenizer trained `steps` steps on the data section `data`."""
    config = {
        "model": {"preset": "transformer-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0},
        "tokenizer": {"kind": "byte", "num_sentinels": 0},
        "data": data,
        "objective": {"kind": "seq2seq", "max_source_len": 48, "max_target_len": 48},
        "training": {"steps": steps, "batch_size": 4, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": steps, "steps": 1},
        "output": {"save_interval": steps, "keep_last": 1, "plot": False},
    }
    (root / "mt.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", str(root / "mt.yaml"), "--out", str(root / "run")]) == 0
    return root / "run"


def report(directory: Path) -> tuple[dict, list[dict]]:
    """eval.json and the records of predictions.jsonl."""
    lines = (directory / "predictions.jsonl").read_text().splitlines()
    return json.loads((directory / "eval.json").read_text()), [json.loads(line) for line in lines]


def test_a_hugging_face_t5_scores_a_tsv_with_the_loss_transformers_computes(t5_dir, tmp_path, capsys):
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{source}\t{target}\n" for source, target in PAIRS))
    out = tmp_path / "report"
    assert main(["evaluate", str(t5_dir), "--data", str(test), "--out", str(out), "--max-new-tokens", "4"]) == 0
    saved, predictions = report(out)
    model = transformers.T5ForConditionalGeneration.from_pretrained(t5_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(t5_dir)
    inputs = tokenizer([s for s, _ in PAIRS], return_tensors="pt", padding=True)
    labels = tokenizer(text_target=[t for _, t in PAIRS], return_tensors="pt", padding=True)["input_ids"]
    labels[labels == tokenizer.pad_token_id] = -100
    with torch.no_grad():
        expected = model(**inputs, labels=labels).loss.item()  # the mean over every reference token
    assert saved["scores"]["test_loss"] == pytest.approx(expected, abs=1e-4)
    assert saved["scores"]["test_perplexity"] == pytest.approx(math.exp(expected), rel=1e-4)
    assert saved["data"]["format"] == "tsv" and saved["data"]["pairs"] == 3  # told by the extension
    assert set(METRICS) <= set(saved["scores"]) and set(METRICS) <= set(saved["baseline"])
    markdown = (out / "eval.md").read_text()
    assert all(f"| {name} |" in markdown for name in ("test_loss", "test_perplexity", *METRICS))
    assert [(p["source"], p["reference"]) for p in predictions] == PAIRS
    assert "written: " in capsys.readouterr().out


def windows_nll(model, tokenizer, documents: list[str], width: int) -> tuple[float, int]:
    """The summed NLL of each document + </s>, cut into windows of `width` tokens, each predicted by transformers'
    T5 from the window before it + </s> (the first from T5's encoding of "": </s>)."""
    total, tokens = 0.0, 0
    for document in documents:
        ids = tokenizer(document, add_special_tokens=False)["input_ids"] + [1]
        for start in range(0, len(ids), width):
            source = ids[max(start - width, 0) : start] + [1]
            target = ids[start : start + width]
            with torch.no_grad():
                loss = model(input_ids=torch.tensor([source]), labels=torch.tensor([target])).loss.item()
            total, tokens = total + loss * len(target), tokens + len(target)
    return total, tokens


@pytest.mark.parametrize("length", [None, 6], ids=["one-window", "windows-of-3"])
def test_perplexity_of_a_text_file_per_token_and_per_word_equals_a_direct_computation(t5_dir, tmp_path, length):
    documents = ["once upon a time there was a little girl named lily", "she liked to play", "lily was a girl"]
    test = tmp_path / "test.txt"
    test.write_text("\n\n".join(documents) + "\n")  # paragraphs: one document each
    out = tmp_path / "report"
    cut = ["--max-source-len", str(length)] if length else []
    assert main(["evaluate", str(t5_dir), "--data", str(test), "--out", str(out), *cut]) == 0
    saved, predictions = report(out)
    model = transformers.T5ForConditionalGeneration.from_pretrained(t5_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(t5_dir)
    total, tokens = windows_nll(model, tokenizer, documents, (length or 512) // 2)
    words = sum(len(d.split()) for d in documents)
    assert saved["data"] | {"files": None} == {
        "files": None,
        "format": "text",
        "model": str(t5_dir),
        "documents": 3,
        "tokens": tokens,
        "words": words,
    }
    assert saved["scores"]["test_loss"] == pytest.approx(total / tokens, abs=1e-4)
    assert saved["scores"]["test_perplexity"] == pytest.approx(math.exp(total / tokens), rel=1e-4)
    assert saved["scores"]["test_word_perplexity"] == pytest.approx(math.exp(total / words), rel=1e-4)
    assert predictions == []  # no continuation asked for (--samples)


def test_bleu_chrf_and_ter_in_the_report_are_sacrebleus_on_the_written_predictions(mt_run, tmp_path):
    import sacrebleu

    pairs = multi30k("test_2016_flickr", 4)
    test = tmp_path / "test.jsonl"  # the last source with two references, its own German and the first one's
    records = [{"en": en, "de": [de]} for en, de in pairs[:3]] + [{"en": pairs[3][0], "de": [pairs[3][1], pairs[0][1]]}]
    test.write_text("".join(json.dumps(record) + "\n" for record in records))
    out = tmp_path / "report"
    options = ["--format", "jsonl-pairs", "--source-field", "en", "--target-field", "de", "--target-list", "each"]
    assert (
        main(["evaluate", str(mt_run), "--data", str(test), *options, "--out", str(out), "--max-new-tokens", "8"]) == 0
    )
    saved, written = report(out)
    assert saved["data"]["pairs"] == 5 and saved["data"]["inputs"] == 4 and written[3]["reference"] == records[3]["de"]
    assert [record["pairs"] for record in written] == [[0], [1], [2], [3, 4]]  # each input's pairs in the file
    outputs = [record["prediction"] for record in written]
    streams = [[r["reference"] if isinstance(r["reference"], str) else r["reference"][0] for r in written]]
    streams.append([None, None, None, written[3]["reference"][1]])
    assert saved["scores"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(outputs, streams).score)
    assert saved["scores"]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(outputs, streams).score)
    assert saved["scores"]["ter"] == pytest.approx(sacrebleu.corpus_ter(outputs, streams).score)
    assert any(outputs)  # something was generated: the scores are not those of empty outputs
    # each with the signature sacrebleu gives it (2 references in some streams: nrefs:var), in eval.md too
    from sacrebleu.metrics import BLEU, CHRF, TER

    for name, metric in {"bleu": BLEU(), "chrf": CHRF(), "ter": TER()}.items():
        metric.corpus_score(outputs, streams)
        assert saved["data"]["sacrebleu_signatures"][name] == str(metric.get_signature())
    assert "nrefs:var|case:mixed|eff:no|tok:13a|smooth:exp|version:" in saved["data"]["sacrebleu_signatures"]["bleu"]
    assert f"BLEU signature: {saved['data']['sacrebleu_signatures']['bleu']}" in (out / "eval.md").read_text()


def test_a_run_scores_a_test_file_in_its_format_into_its_eval_directory(mt_run, capsys):
    test = mt_run.parent / "test.tsv"
    assert main(["evaluate", str(mt_run), "--data", str(test), "--samples", "3", "--max-new-tokens", "6"]) == 0
    assert "written: " in capsys.readouterr().out
    saved, predictions = report(mt_run / "eval" / "test")  # beside the validation report, never over it
    assert not (mt_run / "eval" / "eval.json").exists()
    assert saved["data"]["format"] == "tsv" and len(predictions) == len(saved["samples"]) == 3
    run = load_run(mt_run)
    total, tokens = 0.0, 0
    for source, target in (line.split("\t") for line in test.read_text().splitlines()):
        src = torch.tensor([run.tokenizer.encode([source])[0][:48]])  # cut as generation cuts it
        labels = torch.tensor([run.tokenizer.encode([target.strip()])[0] + [run.tokenizer.eos_id]])
        tgt = torch.cat([torch.tensor([[run.tokenizer.decoder_start_id]]), labels[:, :-1]], dim=1)
        with torch.no_grad():
            logits = run.model(src, tgt).logits
        total += torch.nn.functional.cross_entropy(logits[0], labels[0], reduction="sum").item()
        tokens += labels.shape[1]
    assert saved["data"]["reference_tokens"] == tokens
    assert saved["scores"]["test_loss"] == pytest.approx(total / tokens, abs=1e-5)


def test_a_run_that_mixed_tsv_corpora_reads_a_test_file_as_its_first_member_did(tmp_path, capsys):
    """A mixture's own data.format is the default nobody set (tinystories, which reads a .tsv as one document):
    a run whose first member read TSV files with a header reads the test file so, its header skipped."""
    pairs = multi30k("train", 12)
    for name, rows in (("en-de", pairs), ("de-en", [(de, en) for en, de in pairs])):
        (tmp_path / f"{name}.tsv").write_text("source\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in rows))
    member = {"format": "tsv", "header": True, "val_fraction": 0.25}
    mixture = [
        {"name": name.replace("-", "_"), "data": {**member, "train": [str(tmp_path / f"{name}.tsv")]}}
        for name in ("en-de", "de-en")
    ]
    run = trained(tmp_path, {"mixture": mixture}, steps=1)
    argv = ["evaluate", str(run), "--data", str(tmp_path / "de-en.tsv"), "--max-new-tokens", "2"]
    assert main([*argv, "--samples", "2"]) == 0
    saved, _ = report(run / "eval" / "de-en")
    assert saved["data"]["format"] == "tsv" and saved["data"]["pairs"] == 12  # the header line is no pair
    assert "written: " in capsys.readouterr().out


def test_an_exported_run_scores_as_the_run_does(mt_run, tmp_path):
    exported = tmp_path / "exported"
    assert main(["export", str(mt_run), "--out", str(exported)]) == 0
    test = mt_run.parent / "test.tsv"  # some sources pass the run's 48 tokens: the export's tokenizer does not
    for model, out in ((mt_run, tmp_path / "run"), (exported, tmp_path / "hf")):  # know that length; it is given
        args = ["--data", str(test), "--out", str(out), "--max-new-tokens", "6", "--max-source-len", "48"]
        assert main(["evaluate", str(model), *args]) == 0
    (run_report, run_predictions), (hf_report, hf_predictions) = report(tmp_path / "run"), report(tmp_path / "hf")
    assert hf_predictions == run_predictions
    assert hf_report["data"]["reference_tokens"] == run_report["data"]["reference_tokens"]  # EOS closes both
    assert hf_report["scores"]["test_loss"] == pytest.approx(run_report["scores"]["test_loss"], abs=1e-5)


def test_a_causal_lm_scores_each_document_after_an_opening_eos(tmp_path, tinystories_path, capsys):
    config = {
        "model": {"preset": "decoder_only-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "n_encoder_layers": 2},
        "tokenizer": {"kind": "byte", "num_sentinels": 0},
        "data": {"format": "tinystories", "train": [str(tinystories_path)], "val_fraction": 0.1, "max_documents": 40},
        "objective": {"kind": "causal_lm", "seq_len": 64},
        "training": {"steps": 2, "batch_size": 4, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 2, "steps": 1},
        "output": {"save_interval": 2, "keep_last": 1, "plot": False},
    }
    (tmp_path / "lm.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", str(tmp_path / "lm.yaml"), "--out", str(tmp_path / "run")]) == 0
    documents = ["Tom had a red ball.", "The cat sat on a warm mat all day."]  # each within the 64-byte context
    (tmp_path / "test.txt").write_text("\n\n".join(documents) + "\n")
    out = tmp_path / "report"
    args = ["--data", str(tmp_path / "test.txt"), "--format", "text", "--out", str(out)]  # the run's: tinystories
    assert main(["evaluate", str(tmp_path / "run"), *args]) == 0
    saved, _ = report(out)
    run = load_run(tmp_path / "run")
    eos, total, tokens = run.tokenizer.eos_id, 0.0, 0
    for ids in run.tokenizer.encode(documents):
        stream = torch.tensor([[eos, *ids, eos]])
        with torch.no_grad():
            logits = run.model(None, stream[:, :-1]).logits
        total += torch.nn.functional.cross_entropy(logits[0], stream[0, 1:], reduction="sum").item()
        tokens += stream.shape[1] - 1
    assert saved["data"]["tokens"] == tokens
    assert saved["scores"]["test_loss"] == pytest.approx(total / tokens, abs=1e-5)
    words = sum(len(d.split()) for d in documents)
    assert saved["scores"]["test_word_perplexity"] == pytest.approx(math.exp(total / words), rel=1e-4)
    # a file of 150 paragraphs, read as the run's tinystories (no <|endoftext|>), would be one document:
    # refused in one sentence, where --format text reads its 150
    (tmp_path / "wiki.txt").write_text("\n\n".join(f"Paragraph {i} of the page." for i in range(150)) + "\n")
    argv = ["evaluate", str(tmp_path / "run"), "--data", str(tmp_path / "wiki.txt"), "--out", str(out)]
    assert main(argv) == 2
    assert "read as --format tinystories is one document of 299 lines" in capsys.readouterr().err
    assert main([*argv, "--format", "text", "--samples", "1", "--max-new-tokens", "1"]) == 0
    assert report(out)[0]["data"]["documents"] == 150


def test_no_repeat_ngram_size_reaches_the_generations_as_generate_applies_it(mt_run, tmp_path):
    from encdec.generation import generate
    from encdec.runs.open import open_model

    pairs = multi30k("test_2016_flickr", 3)
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{en}\t{de}\n" for en, de in pairs))
    out = tmp_path / "report"
    flags = ["--max-new-tokens", "24", "--no-repeat-ngram-size", "2", "--num-beams", "2", "--length-penalty", "0.5"]
    assert main(["evaluate", str(mt_run), "--data", str(test), "--out", str(out), *flags]) == 0
    _, written = report(out)
    opened = open_model(mt_run)
    for (source, _), record in zip(pairs, written):
        encoded = opened.text([source], return_tensors="pt", padding=True, truncation=True)
        options = dict(max_new_tokens=24, num_beams=2, no_repeat_ngram_size=2, length_penalty=0.5)
        ids = generate(
            opened.model, encoded["input_ids"], encoded["attention_mask"], defaults=opened.generation, **options
        )
        assert record["prediction"] == opened.text.batch_decode(ids[:, 1:], skip_special_tokens=True)[0].strip()
        tokens = ids[0, 1:].tolist()
        bigrams = [
            tuple(tokens[i : i + 2])
            for i in range(len(tokens) - 1)
            if opened.model.config.pad_id not in tokens[i : i + 2]
        ]
        assert len(bigrams) == len(set(bigrams))  # no token bigram twice
