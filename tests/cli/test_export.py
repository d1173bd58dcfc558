"""`encdec export RUN_DIR --out DIR` on a real tiny run: transformers loads it and computes what encdec does."""

import pytest
import torch
from run_kit import tiny_stories_run

from encdec.cli import main
from encdec.generation import generate
from encdec.runs.load import load_run

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tinystories_path):
    """A T5 run of a few UL2 steps on the TinyStories sample, byte tokenizer, on the CPU."""
    return tiny_stories_run(tmp_path_factory.mktemp("export"), tinystories_path, steps=3, save_interval=3)


def test_export_writes_a_directory_transformers_loads_with_equal_logits_and_tokens(run_dir, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    assert "T5ForConditionalGeneration" in capsys.readouterr().out
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    run = load_run(run_dir)
    texts = ["Once upon a time, there was a little girl named Lily.", "Tom had a red ball."]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert [
        row[: len(ids)] for row, ids in zip(batch["input_ids"].tolist(), run.tokenizer.encode(texts))
    ] == run.tokenizer.encode(texts)
    src, mask = batch["input_ids"], batch["attention_mask"]
    tgt = torch.tensor([[run.tokenizer.decoder_start_id] + run.tokenizer.encode(["Lily"])[0]] * 2)
    with torch.no_grad():
        expected = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = run.model(src, tgt, src_mask=mask.bool()).logits
    assert (got - expected).abs().max().item() < 1e-4
    tokens = model.generate(input_ids=src, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert torch.equal(tokens, generate(run.model, src, mask, max_new_tokens=6))


def test_a_non_empty_out_is_one_sentence_and_exit_2_unless_forced(run_dir, tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")  # an earlier export's: --force replaces only those
    assert main(["export", str(run_dir), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("encdec: error: ") and "exists and is not empty" in err and err.count("\n") == 1
    assert main(["export", str(run_dir), "--out", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "config.json").read_text() != "{}" and (tmp_path / "model.safetensors").is_file()


def test_a_directory_that_is_not_a_run_is_refused(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "hf")]) == 2
    assert "is neither a run directory with checkpoints nor a Hugging Face model directory" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


def test_out_inside_the_run_directory_is_refused(run_dir, capsys):
    assert main(["export", str(run_dir), "--out", str(run_dir / "hf")]) == 2
    assert "inside the run directory" in capsys.readouterr().err
    assert not (run_dir / "hf").exists()
