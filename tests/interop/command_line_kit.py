"""What the families' tests share about the command line: `encdec generate` on a Hugging Face directory writes
transformers' own greedy outputs, and `encdec export` of it writes the family's class, which transformers
reloads with the same logits."""

import json
from collections.abc import Callable

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
