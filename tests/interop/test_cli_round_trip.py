"""Every family of the table through the command line: a tiny random-weight checkpoint of it (benchmarks/
hf_families.py's, its vocabulary widened to encdec's byte tokenizer, which the directory carries as
tokenizer.json), `encdec generate` on the directory writing an output for each input (a decoder-only family's
continuation of it as a prompt), `encdec export` writing a directory transformers reloads as the family's class
with the same logits, and `encdec.load_hf` of the export giving the same model back."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import encdec
from encdec.cli import main
from encdec.interop.families import FAMILIES
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.tokenizers import build_tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["a small test", "zwei Hunde laufen", "x"]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("hf_families", ROOT / "benchmarks" / "hf_families.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SIZES = {**module.SIZES, "vocab_size": 384, "decoder_vocab_size": 384}  # the byte tokenizer's ids
    return module


@pytest.mark.parametrize("model_type", FAMILIES)
def test_generate_export_and_reload_on_the_command_line(model_type, bench, tmp_path, capsys):
    path, hf_class = tmp_path / "in", FAMILIES[model_type].hf_class
    path.mkdir()
    assert bench.build(model_type, hf_class, path) is None
    convert_tokenizer(build_tokenizer("byte")).save(path)
    (tmp_path / "inputs.txt").write_text("\n".join(TEXTS) + "\n")
    args = ["generate", str(path), "-i", str(tmp_path / "inputs.txt"), "--format", "jsonl", "--max-new-tokens", "5"]
    if FAMILIES[model_type].model_family == "whisper":  # a line is a recording's path: text names none, one sentence
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"encdec: error: audio file {TEXTS[0]} does not exist")
    else:
        assert main(args) == 0, capsys.readouterr().err
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r["input"] for r in records] == TEXTS and all(isinstance(r["output"], str) for r in records)
    model = encdec.load_hf(path)
    assert main(["export", str(path), "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    assert hf_class in capsys.readouterr().out
    reloaded = getattr(transformers, hf_class).from_pretrained(tmp_path / "out", attn_implementation="eager").eval()
    ids, mask, tgt = bench.padded_inputs(model.config)
    with torch.no_grad():
        theirs = bench.hf_logits(reloaded, ids, mask, tgt)  # a decoder-only family's of tgt alone, as ours
        ours = model(ids, tgt, src_mask=mask).logits
    assert (theirs - ours).abs().max().item() < 1e-4
    again = encdec.load_hf(tmp_path / "out")
    assert again.config == model.config
