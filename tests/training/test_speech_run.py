"""A Whisper-shaped run on real synthesized speech (espeak-ng): transcription trains from a manifest, resumes
bitwise after a SIGKILL, and refuses an objective its family does not read."""

import json
import shutil
import subprocess

import pytest
import yaml

from encdec.cli import main
from encdec.training.metrics import read_metrics
from tests.training.test_resume import killed_and_resumed, losses

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs apt's espeak-ng to speak the clips")

SENTENCES = [
    "A dog runs in the snow.",
    "Two men sit on a bench.",
    "The girl reads a book.",
    "A cat sleeps on the mat.",
    "The sun is warm today.",
    "Children play in the park.",
    "A man rides a red bike.",
    "Birds fly over the lake.",
]
WHISPER_TOKENS = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|translate|>", "<|notimestamps|>"]


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    """Each sentence spoken by espeak-ng into clips/, and a manifest of train (six) and validation (two)."""
    root = tmp_path_factory.mktemp("speech")
    (root / "clips").mkdir()
    records = []
    for i, text in enumerate(SENTENCES):
        wav = root / "clips" / f"{i}.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "170", "-w", str(wav), text], check=True)
        records.append(json.dumps({"audio": f"clips/{wav.name}", "text": text}) + "\n")
    (root / "train.jsonl").write_text("".join(records[:6]))
    (root / "valid.jsonl").write_text("".join(records[6:]))
    return root


def speech_config(root, path, **changes):
    config = {
        "model": {
            "preset": "whisper-tiny",
            "d_model": 32,
            "n_heads": 2,
            "d_ff": 64,
            "n_encoder_layers": 1,
            "n_decoder_layers": 1,
            "positions": {"max": 64},
            "dropout": 0.1,
        },
        "tokenizer": {"kind": "byte", "extra_specials": WHISPER_TOKENS},
        "data": {
            "format": "speech-jsonl",
            "train": [str(root / "train.jsonl")],
            "validation": [str(root / "valid.jsonl")],
        },
        "objective": {"kind": "transcribe", "language": "en", "max_target_len": 48, "spec_augment": {}},
        "optimizer": {"lr": 2e-3},
        "training": {"steps": 12, "batch_size": 2, "seed": 3, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 6, "steps": 1},
        "output": {"save_interval": 2, "keep_last": 3, "plot": False},
    }
    for key, value in changes.items():
        section, name = key.split("__")
        config[section][name] = value
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_a_transcription_run_resumes_to_the_same_losses_after_a_kill(spoken, tmp_path, device):
    config = speech_config(spoken, tmp_path / "speech.yaml")
    full, killed = killed_and_resumed(config, tmp_path, device)
    curve = losses(full)
    assert len(curve) >= 2 and all(loss == loss and loss > 0 for _, loss in curve)
    assert losses(killed) == curve  # bitwise, SpecAugment's masks and dropout drawn again
    evals = [r for r in read_metrics(full / "metrics.jsonl") if r["kind"] == "eval"]
    assert evals and evals == [r for r in read_metrics(killed / "metrics.jsonl") if r["kind"] == "eval"]


def test_a_speech_family_refuses_a_text_objective_and_a_text_family_transcription(spoken, tmp_path, capsys):
    text_objective = speech_config(spoken, tmp_path / "a.yaml", objective__kind="seq2seq")
    assert main(["train", str(text_objective), "--out", str(tmp_path / "a")]) == 2
    assert "does not fit" in capsys.readouterr().err
    t5 = speech_config(spoken, tmp_path / "b.yaml", model__preset="t5-small")
    assert main(["train", str(t5), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "objective.kind transcribe does not fit the model's family encoder_decoder" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
