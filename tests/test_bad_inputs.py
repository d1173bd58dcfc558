"""A catalogue of bad inputs: each is one sentence on stderr and a non-zero exit, and loses nothing.

Configs, data, checkpoints, Hugging Face directories, command-line arguments and the
file system (symlinks, a busy run, a full disk). For every case: the exit code is not
0, stderr is one line `encdec: error: ...` of under 300 characters without a
traceback, nothing outside the case's own output directory changed (files compared
byte for byte, with their modification times), and a trained run the case pointed at
still holds the checkpoints it held.
"""

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from bad_inputs_kit import TINY, progress
from hf_kit import word_level_t5

from encdec.cli import main

transformers = pytest.importorskip("transformers")

WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was a little girl named lily she liked to play".split()


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """What the cases start from, made once: a tiny config, a trained run, a Hugging Face T5 directory."""
    root = tmp_path_factory.mktemp("library")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    assert main(["train", str(config), "--out", str(root / "run")]) == 0
    word_level_t5(root / "hf", WORDS)
    return root


class Place:
    """One case's directory: copies of the library's parts, an `outside` folder to guard, and `out`."""

    def __init__(self, root: Path, library: Path):
        self.root, self.library = root, library
        self.outside = root / "outside"
        self.outside.mkdir()
        (self.outside / "precious.txt").write_text("a user's file that encdec must never touch\n")
        (self.outside / "step_00000001").mkdir()
        (self.outside / "step_00000001" / "weights.bin").write_bytes(b"\x00" * 64)
        self.out = root / "out"  # the case's own output, free to change

    @property
    def config(self) -> Path:
        return self.library / "tiny.yaml"

    def copy(self, name: str) -> Path:
        """A private copy of the library's `run` or `hf` directory."""
        target = self.root / name
        if not target.exists():
            shutil.copytree(self.library / name, target)
        return target

    def write(self, name: str, data: bytes | str) -> Path:
        path = self.root / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return path

    def config_with(self, **sections) -> Path:
        values = json.loads(json.dumps(TINY))
        for key, value in sections.items():
            section, field = key.split("__")
            values[section][field] = value
        return self.write("changed.yaml", yaml.safe_dump(values))


@dataclass
class Case:
    build: Callable[[Place], list[str]]  # the command line, with whatever files it needs made
    says: str  # a piece of the sentence


def train(place: Place, *overrides: str) -> list[str]:
    return ["train", str(place.config), "--out", str(place.out), *(a for o in overrides for a in ("--set", o))]


def resume(place: Place, *overrides: str) -> list[str]:
    run = place.copy("run")
    return ["train", str(place.config), "--out", str(run), "--resume", *(a for o in overrides for a in ("--set", o))]


def damaged_run(place: Place, relative: str, data: bytes | str | None = None, link_to: Path | None = None) -> Path:
    run = place.copy("run")
    latest = (run / "checkpoints" / "latest").read_text().strip()
    path = run / relative.replace("LATEST", f"checkpoints/{latest}")
    if link_to is not None:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        path.symlink_to(link_to)
    else:
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return run


def damaged_hf(place: Place, name: str, data: bytes | str | None) -> Path:
    hf = place.copy("hf")
    if data is None:
        (hf / name).unlink()
    else:
        (hf / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return hf


def without_tokenizer(place: Place) -> Path:
    hf = place.copy("hf")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (hf / name).unlink(missing_ok=True)
    return hf


def alias_bomb() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        previous = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\nmodel: *i\n"


def generate(place: Place, model: Path, *extra: str, text: bytes | str = "once upon a time\n") -> list[str]:
    return ["generate", str(model), "-i", str(place.write("inputs.txt", text)), *extra]


CASES = {
    # the run config and --set
    "unknown key": Case(lambda p: train(p, "training.stpes=3"), "unknown key training.stpes"),
    "wrong type": Case(lambda p: train(p, "training.steps=many"), "training.steps must be an integer"),
    "infinite lr": Case(lambda p: train(p, "optimizer.lr=.inf"), "optimizer.lr must be a finite number"),
    "nan lr": Case(lambda p: train(p, "optimizer.lr=.nan"), "optimizer.lr must be a finite number"),
    "negative lr": Case(lambda p: train(p, "optimizer.lr=-1"), "optimizer.lr must be positive"),
    "nan clip norm": Case(lambda p: train(p, "training.clip_norm=.nan"), "training.clip_norm must be a finite"),
    "negative weight decay": Case(lambda p: train(p, "optimizer.weight_decay=-1"), "optimizer.weight_decay must be"),
    "one beta": Case(lambda p: train(p, "optimizer.betas=[0.9]"), "optimizer.betas must be two numbers"),
    "beta of 1.5": Case(lambda p: train(p, "optimizer.betas=[0.9, 1.5]"), "optimizer.betas must be two numbers"),
    "zero eps": Case(lambda p: train(p, "optimizer.eps=0"), "optimizer.eps must be positive"),
    "zero batch": Case(lambda p: train(p, "training.batch_size=0"), "training.batch_size must be a positive"),
    "zero accumulation": Case(lambda p: train(p, "training.grad_accum=0"), "training.grad_accum must be"),
    "zero bucket length": Case(lambda p: train(p, "training.bucket_length=0"), "training.bucket_length must be"),
    "bucket length and a token budget": Case(
        lambda p: train(p, "training.bucket_length=32", "training.batch_tokens=4096"),
        "training.bucket_length pads every batch to training.batch_size rows; training.batch_tokens",
    ),
    "zero steps": Case(lambda p: train(p, "training.steps=0"), "training.steps must be a positive integer"),
    "val fraction 1.5": Case(lambda p: train(p, "data.val_fraction=1.5"), "data.val_fraction must be in (0, 1)"),
    "noise density 0": Case(lambda p: train(p, "objective.noise_density=0"), "objective.noise_density must be"),
    "mean span 0.5": Case(lambda p: train(p, "objective.mean_span=0.5"), "objective.mean_span must be at least 1"),
    "no UL2 mixture": Case(lambda p: train(p, "objective.ul2_probabilities=[0, 0, 0]"), "ul2_probabilities must"),
    "seq_len 1": Case(lambda p: train(p, "objective.seq_len=1"), "objective.seq_len must be at least 2"),
    "pack a decoder-only": Case(
        lambda p: train(p, "objective.pack=true", "model.preset=decoder_only-tiny"),
        "objective.pack needs model.family encoder_decoder",
    ),
    "prefix_lm for an encoder-decoder": Case(
        lambda p: train(p, "objective.kind=prefix_lm"), "objective.kind prefix_lm makes one token stream for a causal"
    ),
    "causal_lm for an encoder-decoder": Case(
        lambda p: train(p, "objective.kind=causal_lm"),
        "causal_lm makes one token stream for a causal LM, but the model",
    ),
    "warm-up without an unbalanced adaptation": Case(
        lambda p: train(p, "training.cross_attention_warmup=5"), "set training.init_decoder_from, or drop the warm-up"
    ),
    "decoder source alone": Case(
        lambda p: train(p, "training.init_decoder_from=runs/x"), "training.init_decoder_from is the decoder's source"
    ),
    "an encoder of another width reading the decoder's table": Case(
        lambda p: train(p, "model.encoder_d_model=48"), "set model.embeddings.shared false"
    ),
    "pack a transient-global encoder": Case(
        lambda p: train(p, "objective.pack=true", "model.encoder_attention=transient_global"),
        "objective.pack does not combine with model.attention.encoder transient_global",
    ),
    "pack an encoder with global tokens": Case(
        lambda p: train(
            p, "objective.pack=true", "model.encoder_attention=local_global", "model.attention.global_tokens=first"
        ),
        "objective.pack does not combine with model.attention.global_tokens",
    ),
    "an attention implementation by an unknown name": Case(
        lambda p: train(p, "model.attention.implementation=fast"),
        "model.attention.implementation must be one of auto, dense, flex, got 'fast'",
    ),
    "FlexAttention training on the CPU": Case(
        lambda p: train(p, "model.attention.implementation=flex"),
        "model.attention.implementation flex has no backward on cpu",
    ),
    "local radius without local attention": Case(
        lambda p: train(p, "model.local_radius=8"),
        "model.attention.local_radius acts only with model.attention.encoder",
    ),
    "pack a causal LM": Case(
        lambda p: train(p, "objective.pack=true", "objective.kind=causal_lm"),
        "objective.pack works with objective.kind seq2seq, span_corruption, ul2",
    ),
    "infinite warmup fraction": Case(lambda p: train(p, "schedule.warmup_fraction=.inf"), "must be a finite"),
    "min lr above lr": Case(lambda p: train(p, "schedule.min_lr=1"), "schedule.min_lr (1.0) must not exceed"),
    "zero log interval": Case(lambda p: train(p, "output.log_interval=0"), "output.log_interval must be"),
    "zero keep_last": Case(lambda p: train(p, "output.keep_last=0"), "output.keep_last must be a positive"),
    "zero eval interval": Case(lambda p: train(p, "evaluation.interval=0"), "evaluation.interval must be"),
    "template attribute": Case(
        lambda p: train(p, "objective.source_template='{source.__class__}'"), "may contain only {source}"
    ),
    "template other key": Case(
        lambda p: train(p, "objective.target_template='{summary}'"), "may contain only {target}"
    ),
    "template unbalanced": Case(lambda p: train(p, "objective.source_template='{source'"), "not a valid template"),
    "schedule kind": Case(lambda p: train(p, "schedule.kind=warmup"), "schedule.kind must be one of"),
    "precision fp8": Case(lambda p: train(p, "training.precision=fp8"), "training.precision must be one of"),
    "fp16 on a CPU": Case(lambda p: train(p, "training.precision=fp16"), "fp16 needs a CUDA GPU"),
    "label smoothing 1": Case(lambda p: train(p, "training.label_smoothing=1"), "training.label_smoothing must be in"),
    "unknown optimizer": Case(lambda p: train(p, "optimizer.kind=sgd"), "optimizer.kind must be one of"),
    "unknown metric": Case(lambda p: train(p, "evaluation.metric=meteor"), "evaluation.metric must be one of"),
    "best by a metric never computed": Case(lambda p: train(p, "output.best_by=metric"), "evaluation.generate is 0"),
    "device tpu": Case(lambda p: train(p, "training.device=tpu"), "training.device must be one of"),
    "heads not dividing": Case(lambda p: train(p, "model.n_heads=5"), "model.n_heads (5) must divide"),
    "unknown model key": Case(lambda p: train(p, "model.widht=3"), "unknown key model.widht"),
    "dropout 1.5": Case(lambda p: train(p, "model.dropout=1.5"), "model.dropout must be in [0, 1)"),
    "unknown preset": Case(lambda p: train(p, "model.preset=t6-small"), "t6-small"),
    "model too large": Case(lambda p: train(p, "model.d_model=100000000", "model.d_head=8"), "GiB free"),
    "--set without =": Case(lambda p: train(p, "training.steps"), "--set takes key.sub=value"),
    "--set bad YAML": Case(lambda p: train(p, "training.steps=[1"), "is not valid YAML"),
    "--set into a value": Case(lambda p: train(p, "training.steps.x=1"), "training.steps.x"),
    "--accept-changes alone": Case(lambda p: [*train(p), "--accept-changes"], "--accept-changes goes with --resume"),
    # config files
    "missing config": Case(lambda p: ["train", str(p.root / "none.yaml"), "--out", str(p.out)], "does not exist"),
    "latin-1 config": Case(
        lambda p: [
            "train",
            str(p.write("l.yaml", "model:\n  preset: caf\xe9\n".encode("latin-1"))),
            "--out",
            str(p.out),
        ],
        "is not UTF-8 text",
    ),
    "binary config": Case(
        lambda p: ["train", str(p.write("b.yaml", bytes(range(256)) * 4)), "--out", str(p.out)], "is not UTF-8 text"
    ),
    "not YAML": Case(
        lambda p: ["train", str(p.write("n.yaml", "model:\n  preset: [unclosed\n")), "--out", str(p.out)],
        "is not valid YAML at line",
    ),
    "alias bomb": Case(
        lambda p: ["train", str(p.write("bomb.yaml", alias_bomb())), "--out", str(p.out)], "uses YAML aliases"
    ),
    "huge config": Case(
        lambda p: ["train", str(p.write("h.yaml", "# " + "x" * (2 << 20))), "--out", str(p.out)],
        "run configs are at most",
    ),
    "a list, not a mapping": Case(
        lambda p: ["train", str(p.write("l.yaml", "- 1\n- 2\n")), "--out", str(p.out)],
        "must hold a mapping of sections",
    ),
    "a section that is a string": Case(
        lambda p: ["train", str(p.write("s.yaml", "training: fast\n")), "--out", str(p.out)],
        "training must be a mapping",
    ),
    # data and tokenizers
    "missing data file": Case(lambda p: train(p, "data.train=[/nonexistent/stories.txt]"), "does not exist"),
    "unknown tokenizer": Case(lambda p: train(p, "tokenizer.kind=wordpiece"), "wordpiece"),
    "missing sentencepiece model": Case(
        lambda p: train(p, "tokenizer.kind=sentencepiece", "tokenizer.path=/nonexistent.model"), "does not exist"
    ),
    "unknown data format": Case(lambda p: train(p, "data.format=csv"), "csv"),
    "seq2seq on texts": Case(lambda p: train(p, "objective.kind=seq2seq"), "does not fit data.format"),
    "binary corpus": Case(
        lambda p: train(p, f"data.train=[{p.write('c.txt', bytes(range(256)) * 64)}]", "data.format=text"), "UTF-8"
    ),
    # fine-tuning sources
    "init_from nowhere": Case(
        lambda p: train(p, f"training.init_from={p.root / 'none'}"),
        "neither a run directory with checkpoints nor a Hugging Face model directory",
    ),
    "init_from without tokenizer": Case(
        lambda p: train(p, f"training.init_from={without_tokenizer(p)}"), "has no tokenizer files"
    ),
    "init_from config without keys": Case(
        lambda p: train(p, f"training.init_from={damaged_hf(p, 'config.json', '{}')}"), "config.json"
    ),
    "init_from config not JSON": Case(
        lambda p: train(p, f"training.init_from={damaged_hf(p, 'config.json', '{x')}"), "is not valid JSON"
    ),
    "init_from truncated weights": Case(
        lambda p: train(
            p,
            "training.init_from="
            + str(damaged_hf(p, "model.safetensors", (p.library / "hf" / "model.safetensors").read_bytes()[:200])),
        ),
        "model.safetensors",
    ),
    "init_from random weights": Case(
        lambda p: train(p, "training.init_from=" + str(damaged_hf(p, "model.safetensors", os.urandom(4096)))),
        "model.safetensors",
    ),
    # a trained run: resume, checkpoints, the run directory
    "resume with another lr": Case(lambda p: resume(p, "optimizer.lr=1e-3"), "optimizer.lr 0.002 -> 0.001"),
    "resume with another model": Case(lambda p: resume(p, "model.d_model=64"), "model.d_model 32 -> 64"),
    "train into a trained run": Case(
        lambda p: ["train", str(p.config), "--out", str(p.copy("run"))], "already holds checkpoints"
    ),
    "pointer escaping": Case(
        lambda p: [
            "train",
            str(p.config),
            "--out",
            str(damaged_run(p, "checkpoints/latest", "../../outside/step_00000001\n")),
            "--resume",
        ],
        "latest",
    ),
    "absolute pointer": Case(
        lambda p: [
            "train",
            str(p.config),
            "--out",
            str(damaged_run(p, "checkpoints/latest", "/etc/passwd\n")),
            "--resume",
        ],
        "latest",
    ),
    "truncated weights": Case(
        lambda p: [
            "train",
            str(p.config),
            "--out",
            str(damaged_run(p, "LATEST/model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{}")),
            "--resume",
        ],
        "model.safetensors",
    ),
    "random optimizer state": Case(
        lambda p: [
            "train",
            str(p.config),
            "--out",
            str(damaged_run(p, "LATEST/optimizer.pt", os.urandom(512))),
            "--resume",
        ],
        "optimizer.pt",
    ),
    "state.json not JSON": Case(
        lambda p: ["train", str(p.config), "--out", str(damaged_run(p, "LATEST/state.json", "{not json")), "--resume"],
        "corrupt or truncated",
    ),
    "state.json unknown key": Case(
        lambda p: [
            "train",
            str(p.config),
            "--out",
            str(damaged_run(p, "LATEST/state.json", json.dumps({"train": {"step": 2, "epoch": 1}, "data": {}}))),
            "--resume",
        ],
        "does not hold the training state",
    ),
    "state.json step as text": Case(lambda p: resume_state(p, train={"step": "two"}), "train.step must be an integer"),
    "state.json negative step": Case(lambda p: resume_state(p, train={"step": -50}), "train.step must be zero or more"),
    "state.json step 10**12": Case(lambda p: resume_state(p, train={"step": 10**12}), "train.step must be at most"),
    "state.json step of another directory": Case(lambda p: resume_state(p, train={"step": 1}), "sits in step_00000002"),
    "state.json data without keys": Case(lambda p: resume_state(p, data={}), "data.objective is missing"),
    "state.json a list": Case(lambda p: resume_bytes(p, "LATEST/state.json", "[1, 2]"), "must be a mapping"),
    "empty rng": Case(lambda p: resume_bytes(p, "LATEST/rng.safetensors", b""), "rng.safetensors"),
    "rng of the wrong size": Case(
        lambda p: resume_bytes(
            p, "LATEST/rng.safetensors", tensors_file({"torch": torch.zeros(10, dtype=torch.uint8)})
        ),
        "not the random state",
    ),
    "empty optimizer state": Case(lambda p: resume_bytes(p, "LATEST/optimizer.pt", b""), "optimizer.pt"),
    "foreign optimizer state": Case(
        lambda p: resume_bytes(p, "LATEST/optimizer.pt", pickled({"state": {"w": {"exp_avg": torch.zeros(3)}}})),
        "optimizer.pt does not hold the state",
    ),
    "integer weights": Case(
        lambda p: resume_bytes(p, "LATEST/model.safetensors", integer_weights(p)), "holds torch.int64 values"
    ),
    "fine-tuning weights of NaN": Case(
        lambda p: train(p, f"training.init_from={damaged_run(p, 'LATEST/model.safetensors', nan_weights(p))}"),
        "not a number",
    ),
    "generation.json with text beams": Case(
        lambda p: ["generate", str(damaged_run(p, "LATEST/generation.json", '{"num_beams": "five"}')), "-i", "-"],
        "num_beams must be an integer",
    ),
    "generation.json nested deep": Case(
        lambda p: ["generate", str(damaged_run(p, "LATEST/generation.json", "[" * 5000 + "]" * 5000)), "-i", "-"],
        "generation.json",
    ),
    "experiment seeds a number": Case(lambda p: experiment(p, "seeds: 5\nruns: {a: {}}\n"), "seeds must be a list"),
    "experiment runs a list": Case(lambda p: experiment(p, "runs: [a, b]\n"), "runs must be a mapping"),
    "experiment key not a name": Case(lambda p: experiment(p, "1: x\nruns: {a: {}}\n"), "keys must be names"),
    "experiment run config a number": Case(lambda p: experiment(p, "runs: {a: {config: 3}}\n"), "config must be"),
    "symlinked metrics": Case(lambda p: resume_linked(p, "metrics.jsonl", p.outside / "precious.txt"), "symlink"),
    "symlinked config": Case(lambda p: resume_linked(p, "config.yaml", p.outside / "precious.txt"), "symlink"),
    "symlinked checkpoints": Case(lambda p: resume_linked(p, "checkpoints", p.outside), "symlink"),
    "--out is a file": Case(lambda p: ["train", str(p.config), "--out", str(p.write("file", "x"))], "run directory"),
    # generate, evaluate, export
    "generate from nowhere": Case(lambda p: ["generate", str(p.root / "none"), "-i", "-"], "is not a directory"),
    "generate batch size 0": Case(lambda p: generate(p, p.copy("hf"), "--batch-size", "0"), "--batch-size"),
    "generate beams 0": Case(
        lambda p: generate(p, p.copy("hf"), "--num-beams", "0"), "--num-beams must be a positive integer, got 0"
    ),
    "generate unknown device": Case(lambda p: generate(p, p.copy("hf"), "--device", "gpu"), "--device must be"),
    "generate latin-1 input": Case(lambda p: generate(p, p.copy("hf"), text="caf\xe9\n".encode("latin-1")), "UTF-8"),
    "generate binary input": Case(lambda p: generate(p, p.copy("hf"), text=bytes(range(256))), "UTF-8"),
    "generate into a missing directory": Case(
        lambda p: generate(p, p.copy("hf"), "-o", str(p.root / "no" / "out.txt")), "no"
    ),
    "generate without tokenizer": Case(lambda p: generate(p, without_tokenizer(p)), "has no tokenizer files"),
    "generate config without keys": Case(
        lambda p: generate(p, damaged_hf(p, "config.json", '{"model_type": "t5"}')), "config.json"
    ),
    "generate random weights": Case(
        lambda p: generate(p, damaged_hf(p, "model.safetensors", os.urandom(4096))), "model.safetensors"
    ),
    "evaluate a non-run": Case(lambda p: ["evaluate", str(p.outside)], "checkpoint"),
    "evaluate a missing checkpoint": Case(
        lambda p: ["evaluate", str(p.copy("run")), "--checkpoint", "step_99999999"], "step_99999999"
    ),
    "export a ROT5 run": Case(lambda p: ["export", str(p.copy("run")), "--out", str(p.out)], "no Hugging Face"),
    "export into a full directory": Case(
        lambda p: ["export", str(p.copy("hf")), "--out", str(p.outside)], "is not empty"
    ),
}


def experiment(place: Place, text: str) -> list[str]:
    """compare with an experiment file holding `text`, its base the library's tiny config."""
    path = place.write("experiment.yaml", f"base: {place.config}\n{text}")
    return ["compare", "--experiment", str(path), "--out", str(place.out)]


def resume_bytes(place: Place, relative: str, data: bytes | str) -> list[str]:
    run = damaged_run(place, relative, data)
    return ["train", str(place.config), "--out", str(run), "--resume", "--set", "training.steps=4"]


def resume_state(place: Place, **changes: dict) -> list[str]:
    """Resume a run whose latest state.json has `changes` merged into its sections."""
    latest = (place.library / "run" / "checkpoints" / "latest").read_text().strip()
    state = json.loads((place.library / "run" / "checkpoints" / latest / "state.json").read_text())
    for section, values in changes.items():
        state[section] = {**state[section], **values} if values else {}
    return resume_bytes(place, "LATEST/state.json", json.dumps(state))


def tensors_file(tensors: dict) -> bytes:
    from safetensors.torch import save

    return save(tensors)


def pickled(value: object) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def integer_weights(place: Place) -> bytes:
    """The library run's latest weights rounded to integers: a valid file that torch would load silently."""
    return changed_weights(place, lambda v: v.round().long())


def nan_weights(place: Place) -> bytes:
    """The library run's latest weights with every floating tensor NaN: a valid file of a broken model."""
    return changed_weights(place, lambda v: torch.full_like(v, float("nan")))


def changed_weights(place: Place, change) -> bytes:
    """The library run's latest model.safetensors, each tensor passed through `change`, as file bytes."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save

    latest = (place.library / "run" / "checkpoints" / "latest").read_text().strip()
    path = place.library / "run" / "checkpoints" / latest / "model.safetensors"
    with safe_open(path, "pt") as f:
        metadata = f.metadata()
    return save({k: change(v) for k, v in load_file(path).items()}, metadata=metadata)


def resume_linked(place: Place, name: str, target: Path) -> list[str]:
    run = damaged_run(place, name, link_to=target)
    return ["train", str(place.config), "--out", str(run), "--resume", "--set", "training.steps=4"]


def snapshot(root: Path, skip: Path) -> dict:
    """Every file below root (not following symlinks) but those under `skip`: bytes and modification time."""
    files = {}
    for path in sorted(root.rglob("*")):
        if skip in path.parents or path == skip or path.is_dir() and not path.is_symlink() or path.name == ".lock":
            continue  # .lock: the run lock's own file, which every train touches
        if path.is_symlink():
            files[path] = ("link", os.readlink(path))
        else:
            files[path] = (path.read_bytes(), path.stat().st_mtime_ns)
    return files


def checkpoints(root: Path) -> dict:
    """The checkpoint files of every run below root, as bytes."""
    return {p: p.read_bytes() for p in sorted(root.glob("*/checkpoints/**/*")) if p.is_file() and not p.is_symlink()}


def test_the_catalogue_is_large():
    assert len(CASES) >= 60


@pytest.mark.parametrize("name", CASES)
def test_a_bad_input_is_one_sentence_and_loses_nothing(name, library, tmp_path, capsys):
    case = CASES[name]
    place = Place(tmp_path, library)
    argv = case.build(place)
    before, saved = snapshot(tmp_path, place.out), checkpoints(tmp_path)
    library_before = snapshot(library, library / "none")
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert code != 0, err
    assert len(lines) == 1 and lines[0].startswith("encdec: error: "), err
    assert len(lines[0]) < 300 and "Traceback" not in err, err
    assert case.says in lines[0], lines[0]
    assert snapshot(tmp_path, place.out) == before  # nothing outside the case's output changed
    assert checkpoints(tmp_path) == saved  # no checkpoint of a trained run was lost or altered
    assert snapshot(library, library / "none") == library_before


def test_a_full_disk_at_a_checkpoint_is_one_sentence_and_keeps_the_previous_checkpoint(
    library, tmp_path, capsys, monkeypatch
):
    """The disk fills while the second checkpoint is written (a patched write): its partial files go, the first stays."""
    import errno

    import encdec.runs.checkpoint as checkpoint

    real, calls = checkpoint.save_weights, []

    def fills_the_disk(state, path):
        calls.append(path)
        if len(calls) == 2:
            path.write_bytes(b"\0" * 1024)  # a partial file, as a real full disk leaves
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(state, path)

    monkeypatch.setattr(checkpoint, "save_weights", fills_the_disk)
    run = tmp_path / "run"
    code = main(
        [
            "train",
            str(library / "tiny.yaml"),
            "--out",
            str(run),
            "--set",
            "training.steps=4",
            "--set",
            "output.save_interval=2",
            "--set",
            "evaluation.interval=2",
        ]
    )
    err = "\n".join(line for line in capsys.readouterr().err.splitlines() if not progress(line))
    assert code == 2 and err.count("\n") == 0 and "the disk is full" in err and "previous checkpoint is intact" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best", "latest", "step_00000002"]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_00000002"
    assert (
        main(
            [
                "train",
                str(library / "tiny.yaml"),
                "--out",
                str(run),
                "--resume",
                "--set",
                "training.steps=4",
                "--set",
                "output.save_interval=2",
                "--set",
                "evaluation.interval=2",
            ]
        )
        == 0
    )


def test_a_busy_run_directory_is_one_sentence_naming_the_holder(library, tmp_path, capsys):
    from encdec.runs.run_dir import RunDir
    from encdec.training.run_lock import lock_run_dir

    run = tmp_path / "run"
    with lock_run_dir(RunDir(run)):  # another training holds it (a second open file description conflicts under flock)
        code = main(["train", str(library / "tiny.yaml"), "--out", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"is in use by encdec train (pid {os.getpid()}" in err
    assert sorted(p.name for p in run.iterdir()) == [".lock"]


def test_lines_of_metrics_jsonl_that_are_not_records_are_left_out_and_the_run_goes_on(library, tmp_path, caplog):
    place = Place(tmp_path, library)
    run = place.copy("run")
    metrics = run / "metrics.jsonl"
    good = metrics.read_text()
    bad = ['{"kind": "train", "loss": 1.0}', "[1, 2]", '{"kind": "eval", "step": 1, "val_loss": "low"}', '"x"']
    metrics.write_text(good + "\n".join(bad) + "\n")
    assert main(["train", str(place.config), "--out", str(run), "--resume", "--set", "training.steps=4"]) == 0
    assert "4 lines are not metrics records" in caplog.text
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert metrics.read_text().startswith(good) and all(isinstance(r, dict) and "step" in r for r in records)
    assert max(r["step"] for r in records) == 4


@pytest.mark.parametrize("summary", ["", "[]", '{"steps": "two"}', '{"steps": 2}'])
def test_a_damaged_summary_of_a_compare_member_is_trained_again_not_a_traceback(tmp_path, caplog, summary):
    from encdec.training.experiments import _finished

    (tmp_path / "summary.json").write_text(summary)
    assert _finished(tmp_path, steps=2) is None
    assert "is damaged" in caplog.text and "training that member again" in caplog.text
