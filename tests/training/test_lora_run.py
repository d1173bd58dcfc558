"""A LoRA run end to end: checkpoints of the adapter alone beside a pointer to its base, a killed run resuming
to the same losses, `from_pretrained` applying the adapter, and both exports: the merged model, and a peft
adapter that Hugging Face's T5 under peft loads with encdec's logits."""

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from run_kit import stories_data

import encdec
from encdec.cli import main
from encdec.runs.run_dir import RunDir
from encdec.training.metrics import read_metrics

pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q", "v", "cross_attn.o"], "lora_dropout": 0.1}


def config(**sections) -> dict:
    values = {
        "model": {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.1},
        "tokenizer": {"kind": "byte", "num_sentinels": 50},
        "data": stories_data(max_documents=120),
        "objective": {"kind": "ul2", "seq_len": 64},
        "optimizer": {"lr": 2e-2},
        "training": {"steps": 2, "batch_size": 4, "seed": 7, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 4, "steps": 1},
        "output": {"save_interval": 2, "keep_last": 3, "plot": False},
    }
    for name, section in sections.items():
        values[name] = {**values.get(name, {}), **section} if section is not None else None
    return values


def train(path, out, *extra):
    return [sys.executable, "-m", "encdec", "train", str(path), "--out", str(out), *extra]


def losses(run):
    return [(r["step"], r["loss"]) for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


@pytest.fixture(scope="module")
def lora_setup(tmp_path_factory):
    """A base run (2 steps of a tiny T5) and the config of a LoRA run on it, 10 steps."""
    root = tmp_path_factory.mktemp("lora")
    base_yaml, lora_yaml = root / "base.yaml", root / "lora.yaml"
    base_yaml.write_text(yaml.safe_dump(config()))
    subprocess.run(train(base_yaml, root / "base"), check=True, capture_output=True)
    lora = config(training={"steps": 10, "init_from": str(root / "base")}, lora=LORA)
    lora_yaml.write_text(yaml.safe_dump(lora))
    subprocess.run(train(lora_yaml, root / "full"), check=True, capture_output=True)
    return root, lora_yaml


def test_checkpoints_hold_the_adapter_alone_and_a_pointer_to_the_hashed_base(lora_setup):
    root, _ = lora_setup
    latest = RunDir(root / "full").latest()
    base = json.loads(latest.base.read_text())
    assert base["init_from"] == str(root / "base") and base["kind"] == "run" and len(base["sha256"]) == 64
    names = set(encdec.runs.checkpoint.load_weights(latest.model))
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    layers = 2 * 2 + 2 * 2 * 2 + 2  # q and v of three attentions in 2 + 2 blocks, and the cross o
    assert len(names) == 2 * layers


@pytest.mark.slow
def test_a_lora_run_killed_at_a_step_resumes_to_the_same_losses(lora_setup):
    root, lora_yaml = lora_setup
    killed = root / "killed"
    process = subprocess.Popen(train(lora_yaml, killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300  # a hang detector, not a speed test: the loop ends at the fifth step
    while time.time() < deadline and process.poll() is None:  # past the first checkpoint (step 2), before the end
        if (killed / "metrics.jsonl").exists() and len(losses(killed)) >= 5:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    subprocess.run(train(lora_yaml, killed, "--resume"), check=True, capture_output=True)
    assert losses(killed) == losses(root / "full")  # bitwise, step for step (dropout on)


def test_from_pretrained_applies_the_adapter_and_the_exports_compute_its_logits(lora_setup, tmp_path, capsys):
    root, _ = lora_setup
    src, tgt = torch.tensor([[40, 41, 42, 43, 44, 1]]), torch.tensor([[0, 50, 51, 52]])
    ours = encdec.from_pretrained(root / "full")(src, tgt).logits
    assert not torch.allclose(ours, encdec.from_pretrained(root / "base")(src, tgt).logits, atol=1e-3)
    assert main(["export", str(root / "base"), "--out", str(tmp_path / "base_hf")]) == 0
    assert main(["export", str(root / "full"), "--out", str(tmp_path / "merged")]) == 0
    assert main(["export", str(root / "full"), "--out", str(tmp_path / "adapter"), "--adapter"]) == 0
    assert "PeftModel.from_pretrained" in capsys.readouterr().out
    from peft import PeftModel

    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base_hf")
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    assert torch.allclose(adapted(input_ids=src, decoder_input_ids=tgt).logits, ours, rtol=0, atol=1e-4)
    merged = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "merged").eval()
    assert torch.allclose(merged(input_ids=src, decoder_input_ids=tgt).logits, ours, rtol=0, atol=1e-4)
    assert encdec.from_pretrained(root / "full").generate(src, max_new_tokens=4).shape[0] == 1


def test_a_changed_base_is_refused_in_one_sentence(lora_setup, tmp_path, capsys):
    root, lora_yaml = lora_setup
    copy = tmp_path / "run"
    subprocess.run(["cp", "-r", str(root / "full"), str(copy)], check=True)
    for checkpoint in (copy / "checkpoints").glob("step_*"):
        pointer = json.loads((checkpoint / "base.json").read_text())
        (checkpoint / "base.json").write_text(json.dumps({**pointer, "sha256": "0" * 64}))
    assert main(["export", str(copy), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "has changed since this adapter was trained" in err and len(err.strip().splitlines()) == 1


def test_a_lora_checkpoint_copied_out_of_its_run_goes_on_its_base_or_says_the_base_is_unreachable(
    lora_setup, tmp_path, capsys
):
    """adapter.json says how the adapter goes on base.json's base, wherever the checkpoint lies."""
    root, _ = lora_setup
    latest = RunDir(root / "full").latest()
    adapter = json.loads(latest.adapter.read_text())
    assert adapter == {"lora": {**LORA, "lora_alpha": float(LORA["lora_alpha"])}, "train_only": []}
    copied = shutil.copytree(latest.path, tmp_path / "elsewhere" / "adapter")
    src, tgt = torch.tensor([[40, 41, 42, 43, 44, 1]]), torch.tensor([[0, 50, 51, 52]])
    in_run = encdec.from_pretrained(root / "full", checkpoint=latest.name)(src, tgt).logits
    assert torch.equal(encdec.from_pretrained(copied)(src, tgt).logits, in_run)
    gone = tmp_path / "gone"  # the base moved away: neither where training read it nor where its config named it
    pointer = json.loads((copied / "base.json").read_text())
    pointer.update(init_from=str(gone), source=str(gone / "checkpoints" / "step_00000002"))
    (copied / "base.json").write_text(json.dumps(pointer))
    (tmp_path / "in.txt").write_text("Once upon a time\n")
    capsys.readouterr()
    assert main(["generate", str(copied), "-i", str(tmp_path / "in.txt")]) != 0
    err = capsys.readouterr().err
    assert err.startswith("encdec: error: ") and str(gone) in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "sections, says",
    [
        ({"lora": LORA}, "lora adapts a pretrained model: set training.init_from"),
        ({"lora": {**LORA, "r": 0}, "training": {"init_from": "x"}}, "lora.r must be a positive integer"),
        ({"lora": {**LORA, "target_modules": ["nowhere"]}}, "lora.target_modules 'nowhere' names no layer"),
        ({"training": {"train_only": ["nothing.*"]}}, "training.train_only 'nothing.*' matches no parameter"),
    ],
)
def test_bad_lora_and_train_only_settings_are_one_sentence(lora_setup, tmp_path, capsys, sections, says):
    root, _ = lora_setup
    if "nowhere" in str(sections):
        sections["training"] = {"init_from": str(root / "base")}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config(**sections)))
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
def test_lora_with_train_only_under_ddp_and_fsdp_matches_one_process_and_fsdp_resumes(lora_setup, tmp_path):
    """Two processes on gloo train the adapters and the unfrozen norms as one process does (the global batch
    the same: tests/training/test_distributed.py's settings), and a sharded run resumes to the same losses."""
    from tests.training.test_distributed import train as launch
    from tests.training.test_distributed import train_losses

    _, lora_yaml = lora_setup
    extra = ["--set", "lora.lora_dropout=0.0", "--set", "training.train_only=[decoder.*_norm.weight]"]
    single = train_losses(launch(lora_yaml, tmp_path / "single", 1, *extra))
    for kind in ("ddp", "fsdp"):
        sharded = train_losses(launch(lora_yaml, tmp_path / kind, 2, *extra, "--set", f"training.distributed={kind}"))
        assert max(abs(a - b) for a, b in zip(single, sharded, strict=True)) < 1e-5, kind
    fsdp = ["--set", "training.distributed=fsdp"]
    launch(lora_yaml, tmp_path / "resumed", 2, *extra, *fsdp, "--set", "training.steps=10")
    resumed = train_losses(launch(lora_yaml, tmp_path / "resumed", 2, *extra, *fsdp, "--resume"))
    assert max(abs(a - b) for a, b in zip(single, resumed, strict=True)) < 1e-5
