"""What the families' tests share about the command line: `encdec generate` on a Hugging Face directory writes
transformers' own greedy outputs, and `encdec export` of it writes the family's class, which transformers
reloads with the same logits."""

import json
from collections.abc import Callable
from pathlib import Path

import transformers

import encdec
from encdec.cli import main


def assert_generate_and_export_on_the_command_line(
    reference, tmp_path, capsys, texts: list[str], hf_class: str, logit_gap: Callable
):
    """`reference`, transformers' model saved in tmp_path / "in" with its tokenizer: encdec's generated texts
    of `texts` are its, and the export in tmp_path / "out" reloads as `hf_class` with encdec's logits
    (`logit_gap`(transformers' model, encdec's) under 1e-4). The directory's tokenizer, for more checks."""
    source = tmp_path / "in"
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(texts) + "\n")
    args = ["generate", str(source), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "6"]
    assert main(args) == 0
    outputs = [json.loads(line)["output"] for line in capsys.readouterr().out.splitlines()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    ids = reference.generate(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], max_new_tokens=6)
    assert outputs == [text.strip() for text in tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)]
    assert main(["export", str(source), "--out", str(tmp_path / "out")]) == 0
    assert hf_class in capsys.readouterr().out
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert logit_gap(reloaded, encdec.load_hf(source)) < 1e-4
    return tokenizer


def fine_tuned_and_exported(base: Path, tmp_path: Path, shared_data: Path, capsys, max_source_len: int):
    """A run of the DialogSum T5 recipe fine-tuned for two steps from the Hugging Face directory `base` (in
    tmp_path / "run") and exported (tmp_path / "out"): its model.json, what the export printed, and transformers'
    model reloaded from the export."""
    dialogsum = shared_data / "summarization" / "dialogsum"
    overrides = [
        f"training.init_from={base}",
        f"data.train=[{dialogsum / 'dialogsum.train.jsonl.gz'}]",
        f"data.validation=[{dialogsum / 'dialogsum.dev.jsonl.gz'}]",
        "data.max_documents=40",
        "training.steps=2",
        "training.batch_size=2",
        "training.device=cpu",
        "evaluation.steps=1",
        "evaluation.generate=2",
        "evaluation.max_new_tokens=4",
        f"objective.max_source_len={max_source_len}",
        "objective.max_target_len=8",
    ]
    recipe = Path(__file__).resolve().parents[2] / "configs" / "recipes" / "dialogsum_t5_finetune.yaml"
    sets = [a for o in overrides for a in ("--set", o)]
    assert main(["train", str(recipe), "--out", str(tmp_path / "run"), *sets]) == 0
    described = json.loads(next((tmp_path / "run").rglob("model.json")).read_text())
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    return described, printed, transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
