"""docs/hf_families.md is what benchmarks/hf_families.py finds: every encoder-decoder family of the table
(interop.families) is a row read exactly, no other row is, the script's comparison itself holds on two families
here, and every family, the decoder-only ones too, computes in bfloat16 within the tolerance the table states."""

import importlib.util
import re
from pathlib import Path

import pytest

from encdec.interop.families import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
# the docs table is of transformers' sequence-to-sequence types: the decoder-only families (Gemma 2, Gemma 3, Llama,
# Qwen2, Qwen3) have no row there; tests/interop/test_hf_decoder_only.py and test_hf_gemma_decoder_only.py compare them
# Whisper, of transformers' speech types, has its row beside them (benchmarks/hf_families.py's SPEECH)
SEQ2SEQ = {
    model_type for model_type, family in FAMILIES.items() if family.model_family in ("encoder_decoder", "whisper")
}


def script():
    spec = importlib.util.spec_from_file_location("hf_families", ROOT / "benchmarks" / "hf_families.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_table_says_exact_for_the_families_encdec_reads_and_no_other():
    rows = re.findall(r"^\| `([^`]+)` \| \w+ \| (\w+) \|", (ROOT / "docs" / "hf_families.md").read_text(), re.M)
    assert rows, "docs/hf_families.md has no table"
    assert {model_type for model_type, status in rows if status == "exact"} == SEQ2SEQ
    assert all(status in ("exact", "refused") for _, status in rows)


@pytest.mark.parametrize("model_type, class_name", [("t5", "T5ForConditionalGeneration"), ("marian", "MarianMTModel")])
def test_the_script_finds_a_family_exact_through_load_export_and_size(tmp_path, model_type, class_name):
    status, detail = script().status(model_type, class_name, tmp_path)
    assert status == "exact" and "greedy tokens equal, in bf16 " in detail, detail
    assert "off float32 (transformers' " in detail and "; export exact; size exact" in detail, detail


def test_the_script_shows_a_family_encdec_refuses_with_why(tmp_path):
    status, detail = script().status("prophetnet", "ProphetNetForConditionalGeneration", tmp_path)
    assert status == "refused" and detail.startswith("an n-stream self-attention decoder"), detail


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_family_computes_in_bf16_as_near_float32_as_transformers_does(model_type, tmp_path):
    """Both models hold and compute in bfloat16: encdec's logits stay as near transformers' float32 ones as
    transformers' own bfloat16 logits do (within the factor and slack the table states)."""
    bench = script()
    assert bench.build(model_type, FAMILIES[model_type].hf_class, tmp_path) is None
    ours, theirs = bench.bf16_errors(tmp_path, FAMILIES[model_type].hf_class)
    assert ours <= bench.BF16_FACTOR * theirs + bench.BF16_SLACK, (ours, theirs)
