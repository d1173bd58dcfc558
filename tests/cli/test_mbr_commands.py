"""`encdec generate --mbr N` and `encdec evaluate --mbr N`: MBR's choice through the one TextGenerator, equal to
`generate` with the same seed; asked without sampling, one sentence."""

import json
from pathlib import Path

import pytest
from hf_kit import word_level_t5

from encdec.cli import main
from encdec.generation.text_generator import TextGenerator
from encdec.runs.open import open_model

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was a little girl named lily she liked to play".split()
INPUTS = ["once upon a time", "lily liked to play"]
MBR = ["--mbr", "4", "--do-sample", "--seed", "5", "--max-new-tokens", "5", "--device", "cpu"]


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> Path:
    return word_level_t5(tmp_path_factory.mktemp("t5"), WORDS, close_with_eos=True)


def expected(t5_dir: Path) -> list[str]:
    opened = open_model(t5_dir)
    generator = TextGenerator(opened.text, opened.generation)
    return generator(opened.model, INPUTS, do_sample=True, mbr=4, seed=5, max_new_tokens=5)


def test_generate_and_evaluate_keep_what_generate_s_mbr_keeps(t5_dir, tmp_path):
    (tmp_path / "inputs.txt").write_text("\n".join(INPUTS) + "\n")
    out = tmp_path / "out.txt"
    assert main(["generate", str(t5_dir), "-i", str(tmp_path / "inputs.txt"), "-o", str(out), *MBR]) == 0
    assert out.read_text().splitlines() == expected(t5_dir)
    (tmp_path / "test.tsv").write_text("".join(f"{text}\tshe was a little girl\n" for text in INPUTS))
    report = tmp_path / "report"
    assert main(["evaluate", str(t5_dir), "--data", str(tmp_path / "test.tsv"), "--out", str(report), *MBR]) == 0
    lines = (report / "predictions.jsonl").read_text().splitlines()
    assert [json.loads(line)["prediction"] for line in lines] == expected(t5_dir)


def test_mbr_without_sampling_is_one_sentence(t5_dir, tmp_path, capsys):
    (tmp_path / "inputs.txt").write_text("once\n")
    assert main(["generate", str(t5_dir), "-i", str(tmp_path / "inputs.txt"), "--mbr", "4", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("encdec: error:") and "do_sample" in err and "\n" not in err
