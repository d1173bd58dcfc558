"""README's "Your own data": each configs/own/ config trains on files of the user's own, given with --set
(the formats a newcomer has: TSV pairs, JSON lines with list-valued fields, plain text)."""

import json
from pathlib import Path

import pytest

from encdec.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "own"
QUICK = [
    "training.steps=2",
    "training.batch_size=4",
    "evaluation.interval=2",
    "evaluation.steps=1",
    "evaluation.generate=2",
    "evaluation.max_new_tokens=4",
    "output.plot=false",
    "tokenizer.vocab_size=600",
    "data.val_fraction=0.25",
]
SENTENCES = [
    f"the {w} cat {n} sat on the {v} mat"
    for w in ("red", "big", "old", "shy")
    for v in ("blue", "new")
    for n in range(6)
]


def write_data(kind: str, root: Path) -> list[str]:
    if kind == "translation_tsv":
        path = root / "pairs.tsv"
        path.write_text("".join(f"{s}\t{s.upper()}\n" for s in SENTENCES))
        return [f"data.train=[{path}]"]
    if kind == "summarization_jsonl":
        path = root / "train.jsonl"
        records = [{"document": [s, s[::-1]], "summary": s.split()[1]} for s in SENTENCES]
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return [f"data.train=[{path}]", "objective.max_source_len=32"]
    path = root / "corpus.txt"
    path.write_text("\n\n".join(" ".join(SENTENCES[i : i + 3]) for i in range(0, 48, 3)) + "\n")
    return [f"data.train=[{path}]", "objective.seq_len=32"]


@pytest.mark.parametrize("kind", ["translation_tsv", "summarization_jsonl", "lm_text"])
def test_each_own_data_config_trains_on_the_users_files(kind, tmp_path, capsys):
    overrides = [*QUICK, *write_data(kind, tmp_path)]
    argv = ["train", str(CONFIGS / f"{kind}.yaml"), "--out", str(tmp_path / "run")]
    assert main([*argv, *(a for o in overrides for a in ("--set", o))]) == 0, capsys.readouterr().err
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == "step_00000002"


def test_the_own_translation_model_exports_and_reloads_in_transformers(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    overrides = [*QUICK, *write_data("translation_tsv", tmp_path)]
    argv = ["train", str(CONFIGS / "translation_tsv.yaml"), "--out", str(tmp_path / "run")]
    assert main([*argv, *(a for o in overrides for a in ("--set", o))]) == 0
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0, capsys.readouterr().err
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf")
    assert type(model).__name__ == "MarianMTModel"
