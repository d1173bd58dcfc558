"""`encdec score MODEL --data PAIRS`: one JSON line a pair whose token log-probabilities average to the model's own
loss on the file, from a .tsv or a .jsonl of source and target alike; bad arguments one sentence."""

import json
from pathlib import Path

import pytest
import torch
from hf_kit import word_level_t5

from encdec.cli import main
from encdec.evaluation.encoding import opened_encoding
from encdec.evaluation.likelihood import collate, pair_examples
from encdec.runs.open import open_model

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was a little girl named lily she liked to play".split()
PAIRS = [("once upon a time", "there was a little girl"), ("lily liked to play", "she"), ("a girl", "lily")]


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> Path:
    return word_level_t5(tmp_path_factory.mktemp("t5"), WORDS, close_with_eos=True)


def scored(t5_dir: Path, data: Path, *options: str) -> list[dict]:
    out = data.parent / "scores.jsonl"
    assert main(["score", str(t5_dir), "--data", str(data), "--out", str(out), "--device", "cpu", *options]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_the_file_s_mean_token_nll_is_the_model_s_loss_and_jsonl_reads_as_tsv(t5_dir, tmp_path):
    (tmp_path / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS))
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in PAIRS))
    lines = scored(t5_dir, tmp_path / "pairs.tsv")
    assert [(line["source"], line["target"]) for line in lines] == PAIRS  # the file's order
    opened = open_model(t5_dir)
    examples, _ = pair_examples(opened.model, opened_encoding(opened), PAIRS)
    batch = collate(opened.model)(examples)
    with torch.no_grad():
        loss = opened.model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, labels=batch.labels).ce_loss
    logprobs = [p for line in lines for p in line["token_logprobs"]]
    assert -sum(logprobs) / len(logprobs) == pytest.approx(loss.item(), rel=1e-5)
    first = lines[0]
    assert first["tokens"] == ["there", "was", "a", "little", "girl", "</s>"]
    assert first["score"] == pytest.approx(first["total"] / 6) and first["normalise"] == "mean"
    assert scored(t5_dir, tmp_path / "pairs.jsonl") == lines


def test_gnmt_divides_by_its_length_penalty(t5_dir, tmp_path):
    (tmp_path / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS))
    line = scored(t5_dir, tmp_path / "pairs.tsv", "--normalise", "gnmt", "--alpha", "1")[0]
    assert line["score"] == pytest.approx(line["total"] / ((5 + 6) / 6))


@pytest.mark.parametrize(
    "options, says",
    [
        (["--normalise", "sum", "--alpha", "0.5"], "gnmt's length penalty"),
        (["--alpha", "-1"], "--alpha"),
        (["--format", "text"], "--format"),
        (["--batch-size", "0"], "--batch-size"),
    ],
)
def test_bad_arguments_are_one_sentence(t5_dir, tmp_path, capsys, options, says):
    (tmp_path / "pairs.tsv").write_text("a\tb\n")
    code = main(["score", str(t5_dir), "--data", str(tmp_path / "pairs.tsv"), "--device", "cpu", *options])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("encdec: error:") and says in err and "\n" not in err


def test_a_file_of_texts_or_of_nothing_is_refused(t5_dir, tmp_path, capsys):
    (tmp_path / "empty.tsv").write_text("")
    assert main(["score", str(t5_dir), "--data", str(tmp_path / "empty.tsv"), "--device", "cpu"]) == 2
    assert "no pairs" in capsys.readouterr().err
