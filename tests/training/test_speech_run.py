"""A Whisper-shaped run on real synthesized speech (espeak-ng): transcription trains from a manifest, resumes
bitwise after a SIGKILL, and refuses an objective its family does not read."""

import importlib.util
import json
import logging
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from encdec.audio import read_audio
from encdec.cli import main
from encdec.data.objectives.transcribe import SMOOTHING_ON_TIMESTAMPS, smoothing_on_timestamps
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
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
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


@pytest.fixture(scope="module")
def whisper_run(spoken, tmp_path_factory):
    """A run trained three steps from scripts/whisper_model.py's directory (random weights, an English-only
    WhisperTokenizer of the clips' transcripts), its generating evaluation scoring two validation clips."""
    from tests.scripts.test_whisper_model import script

    root = tmp_path_factory.mktemp("whisper_run")
    assert script().main(["--data", str(spoken), "--out", str(root / "scratch"), "--vocab-size", "300"]) == 0
    config = speech_config(spoken, root / "speech.yaml", training__init_from=str(root / "scratch"))
    written = yaml.safe_load(config.read_text())
    written["model"], written["tokenizer"] = {}, {}  # the directory's own
    del written["objective"]["language"]  # an English-only Whisper's prompt names none
    config.write_text(yaml.safe_dump(written))
    changes = ["training.steps=3", "evaluation.interval=3", "evaluation.generate=2", "evaluation.max_new_tokens=6"]
    assert main(["train", str(config), "--out", str(root / "run"), *(a for c in changes for a in ("--set", c))]) == 0
    return root


def test_a_whisper_run_decodes_by_its_rules_and_its_evaluation_scores_wer(whisper_run):
    evals = [r for r in read_metrics(whisper_run / "run" / "metrics.jsonl") if r["kind"] == "eval"]
    assert 0 <= evals[-1]["val_wer"] and 0 <= evals[-1]["val_cer"]
    generation = json.loads(next((whisper_run / "run" / "checkpoints").glob("*/generation.json")).read_text())
    assert generation["whisper"]["no_timestamps_token_id"] and generation["whisper"]["is_multilingual"] is False


def test_generate_evaluate_and_the_export_in_transformers_pipeline_transcribe_alike(spoken, whisper_run, capsys):
    transformers = pytest.importorskip("transformers")
    run, clips = whisper_run / "run", sorted((spoken / "clips").glob("*.wav"))[6:]  # the validation clips
    (whisper_run / "clips.txt").write_text("".join(f"{clip}\n" for clip in clips))
    capsys.readouterr()
    assert main(["generate", str(run), "-i", str(whisper_run / "clips.txt"), "--max-new-tokens", "6"]) == 0
    generated = capsys.readouterr().out.splitlines()
    assert len(generated) == len(clips)
    out = whisper_run / "report"
    argv = ["evaluate", str(run), "--data", str(spoken / "valid.jsonl"), "--format", "speech-jsonl"]
    assert main([*argv, "--out", str(out), "--max-new-tokens", "6"]) == 0
    report = json.loads((out / "eval.json").read_text())
    predictions = [json.loads(line)["prediction"] for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert predictions == generated
    assert report["baseline"]["wer"] == 100 and report["scores"]["test_loss"] > 0
    assert main(["export", str(run), "--out", str(whisper_run / "hf")]) == 0
    asr = transformers.pipeline("automatic-speech-recognition", model=str(whisper_run / "hf"))
    waves = [{"raw": read_audio(clip).numpy(), "sampling_rate": 16_000} for clip in clips]  # espeak's 22 kHz, at 16
    options = {"max_new_tokens": 6, "num_beams": 1}  # the pipeline would take 5 beams of its own accord
    heard = [result["text"].strip() for result in asr(waves, generate_kwargs=options)]
    assert heard == generated  # so the same WER
    references = [json.loads(line)["text"] for line in (spoken / "valid.jsonl").read_text().splitlines()]
    from encdec.evaluation import wer

    assert wer(heard, references) == pytest.approx(report["scores"]["wer"])
    spec = importlib.util.spec_from_file_location("pipeline_wer", SCRIPTS / "pipeline_wer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    argv = [str(whisper_run / "hf"), str(spoken / "valid.jsonl"), "--max-new-tokens", "6"]
    assert module.main([*argv, "--predictions", str(out / "predictions.jsonl")]) == 0
    said = capsys.readouterr().out
    assert f"WER {report['scores']['wer']:.2f}" in said and f"{len(clips)} of {len(clips)} transcripts the same" in said


def test_bad_audio_through_every_command_is_one_sentence(spoken, whisper_run, tmp_path, capsys):
    from tests.audio.bad_audio_kit import bad_recordings

    run = whisper_run / "run"
    for kind, (path, said) in bad_recordings(tmp_path / "bad").items():
        words = "longer than" if kind == "hours long" else said
        manifest = tmp_path / f"{path.stem}.jsonl"
        manifest.write_text(json.dumps({"audio": str(path), "text": "a dog runs"}) + "\n")
        (tmp_path / "in.txt").write_text(f"{path}\n")
        commands = {
            "generate": ["generate", str(run), "-i", str(tmp_path / "in.txt")],
            "evaluate": ["evaluate", str(run), "--data", str(manifest), "--format", "speech-jsonl"],
            "attention": ["attention", str(run), "--source", str(path), "--output", str(tmp_path / "maps.png")],
            "train": [
                "train",
                str(speech_config(spoken, tmp_path / "bad.yaml", data__train=[str(manifest)] * 2)),
                "--out",
                str(tmp_path / f"run_{path.stem}"),
            ],
        }
        for name, argv in commands.items():
            extra = ["--out", str(tmp_path / f"report_{path.stem}")] if name == "evaluate" else []
            assert main([*argv, *extra]) != 0, (kind, name)
            err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("encdec: error")]
            assert len(err) == 1 and words in err[0] and path.name in err[0], (kind, name, err)
        assert not (tmp_path / "maps.png").exists()


def test_attention_maps_of_a_recording_span_its_encoder_positions(spoken, whisper_run, tmp_path, capsys):
    from encdec.inspection.maps import attention_maps

    maps = attention_maps(whisper_run / "run", str(spoken / "clips" / "6.wav"), max_new_tokens=6)
    assert maps.generated and maps.source_tokens[:2] == ["0.00s", "0.02s"] and len(maps.source_tokens) == 500
    assert maps.target_tokens[0] == "<|notimestamps|>"  # its prompt, then its transcript
    layers, heads, rows, keys = maps.cross.shape
    decoder_layers = json.loads((whisper_run / "scratch" / "config.json").read_text())["decoder_layers"]
    assert (layers, keys, rows) == (decoder_layers, 500, len(maps.target_tokens))
    assert torch.allclose(maps.cross.sum(-1), torch.ones(layers, heads, rows), atol=1e-5)
    given = attention_maps(whisper_run / "run", str(spoken / "clips" / "6.wav"), target="A man rides a red bike.")
    assert not given.generated and given.target_tokens[-1] == "<|endoftext|>"
    argv = ["attention", str(whisper_run / "run"), "--source", str(spoken / "clips" / "6.wav")]
    assert main([*argv, "--output", str(tmp_path / "maps.png"), "--max-new-tokens", "4"]) == 0
    assert (tmp_path / "maps.png").stat().st_size > 0


def test_an_evaluation_past_the_decoder_s_positions_is_refused_before_training(spoken, tmp_path, capsys):
    """The prompt (<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>) and 64 new tokens pass the 64
    positions: refused before the first step, not after the steps before the first evaluation."""
    config = speech_config(spoken, tmp_path / "long.yaml")
    argv = ["train", str(config), "--out", str(tmp_path / "run"), "--set", "evaluation.generate=2"]
    assert main([*argv, "--set", "evaluation.max_new_tokens=64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("encdec: error: evaluation.generate cannot decode its examples: max_new_tokens is 67")
    assert not any(r["kind"] == "train" for r in read_metrics(tmp_path / "run" / "metrics.jsonl"))


def test_a_whisper_run_trains_on_joined_timestamped_windows(whisper_run, capsys, caplog):
    """objective.timestamps through `encdec train`: two steps on windows of several clips with Whisper's times,
    each after <|startofprev|> and the earlier windows' text (the directory's tokenizer holds it), its bounds one
    sentence. Label smoothing over this vocabulary of 300 pieces and 1,501 timestamps keeps 0.08 on the
    timestamps, which is warned of; over Whisper's 51,865 tokens it keeps 0.003, below the warning."""
    config = whisper_run / "speech.yaml"
    out = whisper_run / "timestamped"
    changes = ["training.steps=2", "evaluation.interval=2", "evaluation.generate=0", "objective.timestamps.fraction=1"]
    changes += ["objective.timestamps.previous=1", "training.label_smoothing=0.1"]
    with caplog.at_level(logging.WARNING):
        assert main(["train", str(config), "--out", str(out), *(a for c in changes for a in ("--set", c))]) == 0
    warned = [r.getMessage() for r in caplog.records if "timestamp tokens" in r.getMessage()]
    assert len(warned) == 1 and "label_smoothing 0.1 keeps 0.08" in warned[0] and "1501 timestamp tokens" in warned[0]
    assert (
        smoothing_on_timestamps(0.1, 1501, 51_865) < SMOOTHING_ON_TIMESTAMPS < smoothing_on_timestamps(0.1, 1501, 1810)
    )
    losses = [r["loss"] for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    timestamps = yaml.safe_load((out / "config.yaml").read_text())["objective"]["timestamps"]
    assert timestamps["fraction"] == 1 and timestamps["previous"] == 1
    for bad, says in [("most=0", "objective.timestamps.most"), ("previous=2", "objective.timestamps.previous")]:
        assert (
            main(["train", str(config), "--out", str(whisper_run / "bad"), "--set", f"objective.timestamps.{bad}"]) == 2
        )
        assert says in capsys.readouterr().err and not (whisper_run / "bad").exists()
