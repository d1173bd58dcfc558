"""A checkpoint describes itself (model.json, text.json, a LoRA checkpoint's adapter.json, beside its weights and
tokenizer), so it opens without the training config that made it and, copied out of its run, by every command
that takes a model; a bad part is one sentence naming it."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

import encdec
from encdec.cli import main
from encdec.errors import CheckpointError, ConfigError
from encdec.runs import model_kind, open_model
from encdec.runs.description import described_by_config, read_description
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.training import load_config, train
from encdec.training.run_config import save_config

PAIRS = [(f"{a} {b}", f"{b} {a}") for a in ("red", "green", "blue", "black") for b in ("cat", "dog", "bird", "fish")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A seq2seq run of 6 steps with a source template, byte tokenizer, on the CPU."""
    root = tmp_path_factory.mktemp("described")
    (root / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS * 4))
    config = {
        "model": {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0},
        "tokenizer": {"kind": "byte", "num_sentinels": 0},
        "data": {"format": "tsv", "train": ["pairs.tsv"], "val_fraction": 0.1},
        "objective": {
            "kind": "seq2seq",
            "max_source_len": 24,
            "max_target_len": 16,
            "source_template": "swap: {source}",
        },
        "training": {"steps": 6, "batch_size": 8, "seed": 7, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 6, "steps": 1},
        "output": {"plot": False, "tensorboard": False},
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    train(load_config(root / "tiny.yaml"), root / "run")
    (root / "inputs.txt").write_text("red cat\nblue fish and more words than the run was trained with\n")
    return root / "run"


@pytest.fixture
def copied(run_dir, tmp_path) -> Path:
    """The run's best checkpoint copied (cp -r) to a folder of its own, far from its run."""
    return Path(shutil.copytree(RunDir(run_dir).checkpoint("best").path, tmp_path / "elsewhere" / "model"))


def generated(model: Path, inputs: Path, out: Path, *args: str) -> str:
    assert main(["generate", str(model), "-i", str(inputs), "-o", str(out), "--max-new-tokens", "8", *args]) == 0
    return out.read_text()


def test_a_checkpoint_holds_its_model_config_and_text_format(run_dir):
    checkpoint = RunDir(run_dir).checkpoint("best")
    loaded = open_model(run_dir).run
    assert json.loads(checkpoint.model_config.read_text()) == loaded.model.config.to_dict()
    assert json.loads(checkpoint.text.read_text()) == {
        "source_template": "swap: {source}",
        "target_template": "{target}",
        "mode_tokens": False,
        "padding_side": "right",
        "source_length": 24,
        "languages": [],  # data.src_lang / tgt_lang: none (a text.json from before them reads as none)
    }
    assert not checkpoint.adapter.exists()
    assert read_description(checkpoint) == loaded.description


def test_a_checkpoint_opens_without_its_training_config(run_dir, copied, tmp_path):
    """config.yaml is never read where the description is: one no version could read changes nothing."""
    inputs = run_dir.parent / "inputs.txt"
    expected = generated(run_dir, inputs, tmp_path / "run.txt")
    (copied / "config.yaml").write_text("optimizer: {lr: -1}\nno_such_section: true\n")
    assert generated(copied, inputs, tmp_path / "copied.txt") == expected


def test_a_checkpoint_copied_out_of_its_run_generates_as_its_run(run_dir, copied, tmp_path):
    inputs = run_dir.parent / "inputs.txt"
    assert model_kind(copied) == "checkpoint"
    assert generated(copied, inputs, tmp_path / "copied.txt") == generated(run_dir, inputs, tmp_path / "run.txt")
    beams = ["--num-beams", "3", "--format", "jsonl"]
    assert generated(copied, inputs, tmp_path / "b.jsonl", *beams) == generated(run_dir, inputs, tmp_path / "a", *beams)
    model, tokenizer = encdec.from_pretrained(copied), encdec.load_tokenizer(copied)
    assert model.config == encdec.from_pretrained(run_dir).config
    assert tokenizer.encode(["red cat"]) == encdec.load_tokenizer(run_dir).encode(["red cat"])


def test_a_copied_checkpoint_evaluates_and_exports_as_its_run(run_dir, copied, tmp_path):
    test_file = tmp_path / "test.tsv"
    test_file.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS[:4]))
    scores = []
    for name, model in (("run", run_dir), ("copied", copied)):
        out = tmp_path / f"eval-{name}"
        assert main(["evaluate", str(model), "--data", str(test_file), "--out", str(out), "--max-new-tokens", "8"]) == 0
        scores.append(json.loads((out / "eval.json").read_text())["scores"])
        pytest.importorskip("transformers")
        assert main(["export", str(model), "--out", str(tmp_path / f"hf-{name}")]) == 0
    assert scores[0] == scores[1]
    assert (tmp_path / "hf-run" / "model.safetensors").read_bytes() == (
        tmp_path / "hf-copied" / "model.safetensors"
    ).read_bytes()


def test_a_copied_checkpoint_is_served_as_its_run_generates(run_dir, copied, tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from serving.server_kit import Served, call  # tests/serving's: a real `encdec serve` process

    server = Served(copied)
    try:
        status, answer, _ = call(server.url + "/generate", {"inputs": "red cat", "parameters": {"max_new_tokens": 8}})
    finally:
        server.stop()
    (tmp_path / "in.txt").write_text("red cat\n")
    assert status == 200 and answer["generated_text"] + "\n" == generated(run_dir, tmp_path / "in.txt", tmp_path / "o")


def test_a_copied_checkpoint_asked_for_another_checkpoint_or_without_a_report_directory_is_one_sentence(copied, capsys):
    with pytest.raises(ConfigError, match="is one checkpoint directory, not a run: it holds no checkpoint 'latest'"):
        open_model(copied, "latest")
    capsys.readouterr()
    assert main(["evaluate", str(copied), "--data", str(copied / "nothing.tsv")]) != 0
    err = capsys.readouterr().err
    assert err.startswith("encdec: error: ") and "--out DIR is needed" in err and len(err.splitlines()) == 1


def test_a_copied_checkpoint_is_no_fine_tuning_start_of_its_own(copied):
    """A run's pointers to what it started from name a run's checkpoints: its run directory is asked for."""
    from encdec.training.init_from import load_pretrained

    with pytest.raises(CheckpointError, match="is a checkpoint directory on its own; name the run directory"):
        load_pretrained(str(copied))


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda c: (c / "text.json").unlink(), "has model.json but no text.json; the checkpoint is incomplete"),
        (lambda c: (c / "text.json").write_text('{"source_template": "{x}"}'), "text.json is not a text format"),
        (lambda c: (c / "model.json").write_text("[1, 2"), "is not valid JSON"),
        (lambda c: edit(c / "model.json", d_model=64), "does not match its config"),
        (lambda c: edit(c / "model.json", family="decoder_only"), "describes a model encdec cannot build"),
        (lambda c: edit(c / "model.json", n_layerz=2), "unknown key model.n_layerz"),
        (lambda c: (c / "base.json").write_text("{}"), "has model.json but no adapter.json"),
    ],
)
def test_a_damaged_description_is_one_sentence_naming_the_part(copied, damage, says):
    damage(copied)
    with pytest.raises(CheckpointError, match=None) as caught:
        open_model(copied)
    assert says in str(caught.value) and "\n" not in str(caught.value) and len(str(caught.value)) < 300


def edit(path: Path, **values) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


@pytest.mark.parametrize(
    "sections",
    [
        {"objective": {"kind": "seq2seq", "source_template": "s: {source}", "target_template": "t: {target}"}},
        {"objective": {"kind": "ul2", "seq_len": 40, "mode_tokens": True}, "tokenizer": {"num_sentinels": 20}},
        {
            "model": {"preset": "decoder_only-tiny", "d_model": 32, "n_heads": 2, "d_ff": 64, "max_positions": 64},
            "objective": {"kind": "causal_lm", "seq_len": 48},
        },
    ],
    ids=["seq2seq", "ul2", "causal_lm"],
)
def test_a_checkpoint_without_a_description_is_described_by_its_config_as_training_describes_it(
    sections, tmp_path, tinystories_path
):
    """The path old checkpoints take (config.yaml's model, objective, lora and train_only keys) gives the
    description training writes beside new ones."""
    from encdec.models import build_model

    values = {"model": {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64}, **sections}
    values["data"] = {"train": [str(tinystories_path)]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(values))
    cfg = load_config(tmp_path / "c.yaml")
    tokenizer = encdec.build_tokenizer("byte", num_sentinels=cfg.tokenizer.num_sentinels)
    checkpoint = CheckpointDir(tmp_path / "step_00000001")
    checkpoint.path.mkdir()
    save_config(cfg, checkpoint.config)
    described = described_by_config(checkpoint, tokenizer)
    assert described == cfg.description(build_model(described.model))


def test_the_run_config_is_trainings_and_the_package_root_offers_it():
    import encdec.runs
    import encdec.training

    assert encdec.load_config is load_config and encdec.RunConfig is encdec.training.RunConfig
    assert "RunConfig" not in encdec.runs.__all__  # runs reads no training config
