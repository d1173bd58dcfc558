"""The recipes train end to end; fine-tuning starts from another run's weights and tokenizer."""

from pathlib import Path

from run_kit import sets

from encdec.cli import main
from encdec.runs.load import load_run
from encdec.training.metrics import read_metrics

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "recipes"
TINY = sets("training.steps=2", "evaluation.steps=1", "training.batch_size=4", "data.max_documents=300")
TINY += sets("evaluation.generate=2", "evaluation.max_new_tokens=4")


def data_paths(shared_data: Path, *names: str) -> str:
    return "[" + ", ".join(str(shared_data / name) for name in names) + "]"


def test_multi30k_recipe_trains_on_sentence_pairs(tmp_path, shared_data):
    m30k = "translation/multi30k/"
    code = main(
        [
            "train",
            str(RECIPES / "multi30k_en_de.yaml"),
            "--out",
            str(tmp_path / "run"),
            *TINY,
            "--set",
            "tokenizer.kind=byte",
            "--set",
            "model.preset=transformer-tiny",
            "--set",
            f"data.train={data_paths(shared_data, m30k + 'train.en.gz', m30k + 'train.de.gz')}",
            "--set",
            f"data.validation={data_paths(shared_data, m30k + 'val.en.gz', m30k + 'val.de.gz')}",
        ]
    )
    assert code == 0
    assert len([r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]) == 2


def test_dialogsum_fine_tune_starts_from_the_pretrained_run(tmp_path, tiny_config, shared_data, capsys):
    pretrained = tmp_path / "pretrained"
    assert main(["train", str(tiny_config), "--out", str(pretrained), "--set", "training.steps=2"]) == 0
    ds = "summarization/dialogsum/"
    args = [
        "train",
        str(RECIPES / "dialogsum_finetune.yaml"),
        *TINY,
        "--set",
        f"training.init_from={pretrained}",
        "--set",
        f"data.train={data_paths(shared_data, ds + 'dialogsum.train.jsonl.gz')}",
        "--set",
        f"data.validation={data_paths(shared_data, ds + 'dialogsum.dev.jsonl.gz')}",
    ]
    assert main(args + ["--out", str(tmp_path / "tuned"), "--set", "optimizer.lr=1e-12"]) == 0
    before, after = load_run(pretrained, "latest"), load_run(tmp_path / "tuned", "latest")
    assert after.tokenizer.vocab_size == before.tokenizer.vocab_size
    assert after.model.config.d_model == 32 and after.model.config.dropout == 0.1  # architecture inherited
    for name, tensor in before.model.state_dict().items():  # lr ~0: the weights are the pretrained ones
        assert (after.model.state_dict()[name] - tensor).abs().max() < 1e-6, name
    capsys.readouterr()
    wrong = ["--set", "model.d_model=48", "--out", str(tmp_path / "wrong")]
    assert main(args + wrong) == 2
    assert capsys.readouterr().err == (
        "encdec: error: model.d_model 48 contradicts training.init_from's model (d_model 32): its weights would not "
        "fit; drop the key or train from scratch\n"
    )
    assert not (tmp_path / "wrong").exists()  # said before the run directory is made


def test_passkey_recipe_trains_on_the_files_encdec_data_passkey_writes(tmp_path, shared_data):
    """configs/recipes/passkey_longt5.yaml as its header says, at toy size: `encdec data passkey` writes the
    files, the LongT5-local model trains on them and scores its generated keys by exact match."""
    spm = shared_data / "tokenizers" / "mistral_tokenizer.model.v1"
    stories = shared_data / "tinystories" / "tinystories_valid_head.txt.gz"
    files = {}
    for split, seed in (("train", 1), ("validation", 2)):
        files[split] = tmp_path / f"{split}.jsonl"
        args = ["data", "passkey", str(stories), "--out", str(files[split]), "--lengths", "256,512", "--digits", "2"]
        args += ["--per-cell", "6", "--seed", str(seed), "--tokenizer", "sentencepiece", "--tokenizer-path", str(spm)]
        assert main(args) == 0
    code = main(
        [
            "train",
            str(RECIPES / "passkey_longt5.yaml"),
            "--out",
            str(tmp_path / "run"),
            *TINY,
            "--set",
            f"data.train=[{files['train']}]",
            "--set",
            f"data.validation=[{files['validation']}]",
            "--set",
            "training.batch_tokens=2048",
        ]
    )
    assert code == 0
    evals = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "eval"]
    assert "val_exact_match" in evals[-1]
