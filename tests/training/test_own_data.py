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


def scitldr_records() -> list[dict]:
    """SciTLDR's shape: the source a list of sentences, the target a list of reference summaries."""
    return [
        {"source": [s, s[::-1], "We show it."], "target": [s.split()[1], f"{s.split()[1]} {s.split()[-1]}"]}
        for s in SENTENCES
    ]


@pytest.mark.parametrize(
    "source_list, target_list, separator, expected",
    [
        ("join", "first", " ", [("a b. c d.", "x")]),
        ("join", "each", " ", [("a b. c d.", "x"), ("a b. c d.", "y z")]),
        ("first", "join", " | ", [("a b.", "x | y z")]),
        ("each", "each", " ", [("a b.", "x"), ("a b.", "y z"), ("c d.", "x"), ("c d.", "y z")]),
    ],
)
def test_list_valued_fields_are_joined_taken_first_or_paired_each(
    tmp_path, source_list, target_list, separator, expected
):
    from encdec.data.formats import read_corpus

    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"src": ["a b.", "c d."], "tgt": ["x", "y z"]}) + "\n")
    options = dict(source_field="src", target_field="tgt", source_list=source_list, target_list=target_list)
    assert list(read_corpus("jsonl-pairs", [path], **options, list_separator=separator)) == expected


def test_a_scitldr_shaped_file_trains_through_the_config_alone(tmp_path, capsys):
    """Sentences joined, every reference summary its own pair: 48 records of 2 references train on 96 pairs."""
    from encdec.training.run_config import load_config
    from encdec.training.run_data import read_items

    path = tmp_path / "scitldr.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in scitldr_records()))
    fields = ["data.source_field=source", "data.target_field=target", "data.target_list=each", f"data.train=[{path}]"]
    overrides = [*QUICK, *fields, "objective.max_source_len=48", "data.val_fraction=0.1"]
    cfg = load_config(CONFIGS / "summarization_jsonl.yaml", overrides)
    train, validation = read_items(cfg)
    assert len(train) + len(validation) == 96
    assert (
        "the red cat 0 sat on the blue mat tam eulb eht no tas 0 tac der eht We show it.",
        "red mat",
    ) in train + validation
    argv = ["train", str(CONFIGS / "summarization_jsonl.yaml"), "--out", str(tmp_path / "run")]
    assert main([*argv, *(a for o in overrides for a in ("--set", o))]) == 0, capsys.readouterr().err
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == "step_00000002"
