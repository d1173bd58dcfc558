"""Bounds before allocation (issue 27, mechanism 2): a size too large for the machine, or out of range, is one
sentence before anything is allocated, in every path that builds a model, a vocabulary or a search.

Each case runs under a guard: the process's address space is capped a few GiB above what it holds (an
allocation a check failed to refuse fails instead of taking the machine down, and the case then fails: a
traceback, not the sentence), it must finish within seconds, and its peak resident memory must not grow by
more than a little. From the command line a case is exactly one stderr line `encdec: error: ...` of under 300
characters (exit code 2); from the API one EncdecError; either names the figure that was refused.
"""

import json
import logging
import os
import resource
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
import torch
import yaml
from bad_inputs_kit import TINY, progress

import encdec
from encdec.cli import main
from encdec.errors import EncdecError
from encdec.runs.open import open_model
from encdec.sizing import available_cores, chinchilla
from encdec.tokenizers import build_tokenizer

HERE = Path(__file__).resolve().parent
FIXTURE_RUN = HERE / "fixtures" / "checkpoint_2ba69c1" / "run"  # a 50k-parameter T5 layout with a byte tokenizer
HEADROOM = 3 << 30  # address space a case may add: far below what any refused size needs
SECONDS = 30  # a refusal is immediate; the cases that build data first take a few seconds on a busy CPU
RSS_GROWTH = 1 << 30


class Place:
    """One case's directory: the tiny config, private copies of the fixture run and a tiny Hugging Face T5
    directory (made by encdec itself: transformers is not needed), and `out`, the case's own output."""

    def __init__(self, root: Path):
        self.root, self.out = root, root / "out"
        self.config = root / "tiny.yaml"
        self.config.write_text(yaml.safe_dump(TINY))

    def run(self) -> Path:
        target = self.root / "run"
        if not target.exists():
            shutil.copytree(FIXTURE_RUN, target)
        return target

    def hf(self, **changes) -> Path:
        """A tiny T5 directory whose config.json has `changes` on top."""
        target = self.root / "hf"
        if not target.exists():
            cfg = encdec.ModelConfig(vocab_size=32, d_model=16, n_heads=4, d_ff=32, n_encoder_layers=1, dropout=0.0)
            encdec.save_hf(encdec.build_model(cfg), target)
        values = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps({**values, **changes}))
        return target

    def bart(self) -> Path:
        """A tiny BART directory: learned positions, 64 of them."""
        from encdec.interop.families import FAMILIES

        target = self.root / "bart"
        cfg = encdec.ModelConfig.from_dict(
            dict(
                vocab_size=32,
                d_model=16,
                n_heads=4,
                d_ff=32,
                n_encoder_layers=1,
                dropout=0.0,
                position="learned",
                position_offset=2,
                max_positions=64,
                norm="layernorm",
                norm_eps=1e-5,
                norm_position="post",
                bias=True,
                scale_attention=True,
                embedding_norm=True,
                final_logits_bias=True,
                activation="gelu",
                scale_output=False,
            )
        )
        FAMILIES["bart"].save(encdec.build_model(cfg), target)
        return target

    def run_with(self, relative: str, change: Callable[[str], str]) -> Path:
        """The fixture run with the file at `relative` (below its checkpoint) rewritten, or written, by `change`."""
        run = self.run()
        for step in run.glob("checkpoints/step_*"):
            path = step / relative
            path.write_text(change(path.read_text() if path.exists() else ""))
        return run

    def inputs(self) -> Path:
        path = self.root / "inputs.txt"
        path.write_text("A dog runs.\n")
        return path


def train(place: Place, *overrides: str) -> list[str]:
    return ["train", str(place.config), "--out", str(place.out), *(a for o in overrides for a in ("--set", o))]


def generate(place: Place, model: Path, *extra: str) -> list[str]:
    return ["generate", str(model), "-i", str(place.inputs()), "--device", "cpu", *extra]


def manifest_with(**values) -> Callable[[str], str]:
    return lambda text: json.dumps({**json.loads(text), **values})


def vm_bytes() -> int:
    """The process's address space now (VmSize)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


@contextmanager
def guarded():
    """The guard every case runs under (see the module docstring)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm_bytes() + HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.monotonic()
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert time.monotonic() - start < SECONDS
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss < RSS_GROWTH


def refusal(act: list[str] | Callable[[], object], capsys) -> str:
    """The one sentence `act` ends in: a command line run through the CLI, or a call of the API."""
    capsys.readouterr()
    if callable(act):
        with guarded(), pytest.raises(EncdecError) as refused:
            act()
        return str(refused.value)
    argv = act
    with guarded():
        code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("encdec: error: ") and len(lines[0]) < 300, err
    return lines[0]


def snapshot(root: Path, skip: Path) -> dict:
    """Every file below root but those under `skip`: its bytes."""
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and skip not in p.parents}


def check(place: Place, build, says: str, capsys) -> None:
    """Make the case, then: it is refused in one sentence holding `says`, and nothing outside `out` changed."""
    act = build(place)
    before = snapshot(place.root, place.out)
    assert says in refusal(act, capsys)
    assert snapshot(place.root, place.out) == before


TOO_LARGE = {
    "run config d_model 10^8": (lambda p: train(p, "model.d_model=100000000", "model.d_head=8"), "GiB free"),
    "run config vocabulary 10^12": (lambda p: train(p, "model.vocab_size=1000000000000"), "vocabulary 1e+12"),
    "run config 4096 experts in 4096 layers": (
        lambda p: train(p, "model.n_experts=4096", "model.n_encoder_layers=4096"),
        "4,096 + 4,096 layers",
    ),
    "HF config.json d_model 10^9": (lambda p: generate(p, p.hf(d_model=10**9)), "d_model 1e+09"),
    "HF config.json vocabulary 10^12": (lambda p: generate(p, p.hf(vocab_size=10**12)), "GiB free"),
    "init_from an HF directory with d_ff 10^10": (
        lambda p: train(p, f"training.init_from={p.hf(d_ff=10**10)}"),
        "GiB free",
    ),
    "a run whose saved config has d_model 10^9": (
        lambda p: generate(p, p.run_with("config.yaml", lambda t: t.replace("d_model: 32", "d_model: 1000000000"))),
        "GiB free",
    ),
    "from_pretrained of an HF directory with 10^12 rows": (
        lambda p: partial(encdec.from_pretrained, p.hf(vocab_size=10**12)),
        "GiB free",
    ),
}


@pytest.mark.parametrize("name", TOO_LARGE)
def test_a_model_too_large_for_the_machine_is_one_sentence_before_it_is_built(name, tmp_path, capsys):
    build, says = TOO_LARGE[name]
    check(Place(tmp_path), build, says, capsys)


def test_size_counts_a_model_too_large_to_build_from_its_config_alone(tmp_path, capsys):
    """`encdec size` builds on the meta device, many experts and layers as smaller models of the same config
    (models/parameter_count.py), so 4,096 experts in 4,096 layers, which no machine here could build, is a count,
    not a refusal."""
    from encdec.cli import main

    argv = [
        "size",
        str(Place(tmp_path).config),
        "--set",
        "model.n_experts=4096",
        "--set",
        "model.n_encoder_layers=4096",
    ]
    assert main(argv) == 0
    total = int(capsys.readouterr().out.split("parameters:")[1].split()[0].replace(",", ""))
    assert total > 4096 * 4096 * 2 * 16 * 16  # every encoder layer's 4,096 experts, two matrices each


OUT_OF_RANGE = {
    "no decoder layers": (lambda p: train(p, "model.n_decoder_layers=-3"), "model.n_decoder_layers must be"),
    "a million layers": (lambda p: train(p, "model.n_encoder_layers=1000000"), "must be at most 4,096, got 1,000,000"),
    "d_head 0": (lambda p: train(p, "model.d_head=0"), "model.d_head must be a positive integer, got 0"),
    "no kv heads": (lambda p: train(p, "model.n_kv_heads=0"), "model.n_kv_heads must be a positive integer"),
    "zero norm eps": (lambda p: train(p, "model.norm_eps=0"), "model.norms.eps must be in (0, 1], got 0.0"),
    "HF d_kv 0": (
        lambda p: generate(p, p.hf(d_kv=0)),
        "model.d_head must be a positive integer, got 0 (config.json's d_kv)",
    ),
    "HF no buckets": (
        lambda p: generate(p, p.hf(relative_attention_num_buckets=0)),
        "model.positions.relative_buckets",
    ),
    "HF negative decoder layers": (lambda p: generate(p, p.hf(num_decoder_layers=-3)), "got -3"),
    "HF layer count 2.5": (lambda p: generate(p, p.hf(num_layers=2.5)), "model.n_encoder_layers must be an integer"),
    "HF pad id past the vocabulary": (lambda p: generate(p, p.hf(pad_token_id=10**6)), "must be below vocab_size"),
    "API max_positions 0": (lambda p: partial(encdec.ModelConfig, positions={"max": 0}), "model.positions.max"),
    "API rope_theta inf": (
        lambda p: partial(encdec.ModelConfig, positions={"rope_theta": float("inf")}),
        "model.positions.rope_theta",
    ),
}


@pytest.mark.parametrize("name", OUT_OF_RANGE)
def test_a_size_out_of_range_is_one_sentence_naming_the_key(name, tmp_path, capsys):
    build, says = OUT_OF_RANGE[name]
    check(Place(tmp_path), build, says, capsys)


SENTINELS = {
    "run config 10^9 sentinels": (lambda p: train(p, "tokenizer.num_sentinels=1000000000"), "num_sentinels"),
    "saved manifest 10^9 sentinels": (
        lambda p: generate(p, p.run_with("tokenizer/encdec_tokenizer.json", manifest_with(num_sentinels=10**9))),
        "must be at most 100,000, got 1,000,000,000",
    ),
    "saved manifest sentinels as text": (
        lambda p: generate(p, p.run_with("tokenizer/encdec_tokenizer.json", manifest_with(num_sentinels="many"))),
        "num_sentinels must be an integer",
    ),
    "API load_tokenizer of a manifest of 10^9 sentinels": (
        lambda p: partial(
            encdec.load_tokenizer, p.run_with("tokenizer/encdec_tokenizer.json", manifest_with(num_sentinels=10**9))
        ),
        "got 1,000,000,000",
    ),
    "API byte tokenizer of 10^9 sentinels": (
        lambda p: partial(build_tokenizer, "byte", num_sentinels=10**9),
        "got 1,000,000,000",
    ),
    "API trained vocabulary of 10^12": (
        lambda p: partial(build_tokenizer, "bpe", texts=["a b"], vocab_size=10**12),
        "vocab_size 1,000,000,000,000 is too large",
    ),
}


@pytest.mark.parametrize("name", SENTINELS)
def test_a_vocabulary_too_large_is_one_sentence_before_it_is_built(name, tmp_path, capsys):
    build, says = SENTINELS[name]
    check(Place(tmp_path), build, says, capsys)


def hf_with_generation(place: Place, **options) -> Path:
    hf = place.hf()
    (hf / "generation_config.json").write_text(json.dumps(options))
    return hf


def api_generate(place: Place, **options) -> Callable[[], object]:
    """An API case: encdec.generate on the fixture run's model with `options`."""
    model = encdec.from_pretrained(place.run())
    return partial(encdec.generate, model, torch.tensor([[65, 32, 100, 1]]), **options)


GENERATION = {
    "--num-beams 10^8": (lambda p: generate(p, p.run(), "--num-beams", "100000000"), "must be at most 1,024"),
    "--max-new-tokens 10^12": (
        lambda p: generate(p, p.run(), "--max-new-tokens", str(10**12)),
        "must be at most 1,048,576",
    ),
    "--max-source-len 10^12": (lambda p: generate(p, p.run(), "--max-source-len", str(10**12)), "--max-source-len"),
    "1024 beams of 10^6 tokens": (
        lambda p: generate(p, p.run(), "--num-beams", "1024", "--max-new-tokens", "1000000"),
        "GiB free",
    ),
    "--max-source-len past a BART's 64 positions": (
        lambda p: generate(p, p.bart(), "--max-source-len", "1000"),
        "max_source_len is 1,000 but this model has 64 positions",
    ),
    "HF generation_config.json num_beams 10^8": (
        lambda p: generate(p, hf_with_generation(p, num_beams=10**8)),
        "num_beams must be at most 1,024",
    ),
    "evaluate --num-beams 10^8": (
        lambda p: ["evaluate", str(p.run()), "--num-beams", str(10**8)],
        "must be at most 1,024",
    ),
    "generation.json max_new_tokens 10^12": (
        lambda p: generate(p, p.run_with("generation.json", lambda t: '{"max_new_tokens": 1000000000000}')),
        "max_new_tokens must be",
    ),
    "API num_beams 10^8": (lambda p: api_generate(p, num_beams=10**8), "num_beams must be at most 1,024"),
    "API max_new_tokens 10^12": (lambda p: api_generate(p, max_new_tokens=10**12), "max_new_tokens must be"),
    "API 1024 beams of 10^6 tokens": (lambda p: api_generate(p, num_beams=1024, max_new_tokens=10**6), "GiB free"),
    "API max_source_len 10^12": (
        lambda p: partial(open_model, p.run(), max_source_len=10**12),
        "max_source_len must be at most 1,048,576",
    ),
}


@pytest.mark.parametrize("name", GENERATION)
def test_a_generation_too_large_is_one_sentence_before_the_search_allocates(name, tmp_path, capsys):
    build, says = GENERATION[name]
    check(Place(tmp_path), build, says, capsys)


def step_floor(place: Place) -> Callable[[], object]:
    """The memory floor of a training step of 2^20 rows of 2^20 positions, asked directly."""
    from encdec.training.memory import check_activations_fit
    from encdec.training.run_config import load_config

    cfg = load_config(place.config, ["training.batch_size=1048576", "objective.seq_len=1048576"])
    model_cfg = encdec.preset("rot5-tiny", vocab_size=280)
    return partial(check_activations_fit, cfg, model_cfg, torch.device("cpu"), 1000)


def step_floor_small(place: Place) -> Callable[..., object]:
    """The memory floor of a training step that fits any machine, asked directly."""
    from encdec.training.memory import check_activations_fit
    from encdec.training.run_config import load_config

    model_cfg = encdec.preset("rot5-tiny", vocab_size=280)
    check_activations_fit(load_config(place.config), model_cfg, torch.device("cpu"), 1000)  # fits alone
    return partial(check_activations_fit, load_config(place.config), model_cfg, torch.device("cpu"), 1000)


TRAINING_STEP = {
    "a batch larger than the data": (lambda p: train(p, "training.batch_size=1000"), "exceeds the 815 training"),
    "2^28 tokens a step": (
        lambda p: train(p, "objective.seq_len=1048576", "training.grad_accum=64"),
        "one optimizer step would gather 268,435,456 tokens",
    ),
    "a step's activations": (step_floor, "lower training.batch_size"),
    "a step beside a teacher of 2^60 bytes": (
        lambda p: partial(step_floor_small(p), teacher_bytes=1 << 60),
        "of it activations and logits, 1.1e+09 GiB the teacher's weights)",
    ),
    "size --tokens nan": (lambda p: ["size", "--tokens", "nan"], "--tokens must be a finite number, got nan"),
    "size --flops inf": (lambda p: ["size", "--flops", "inf"], "--flops must be a finite number, got inf"),
    "size --params -1": (lambda p: ["size", "--params=-1"], "--params must be from 0.6 to 1.9e+13 (what the fits"),
    "size --tokens 1e200": (lambda p: ["size", "--tokens", "1e200"], "--tokens must be from 0.3 to 9.49e+15"),
    "API chinchilla of nan tokens": (
        lambda p: partial(chinchilla, tokens=float("nan")),
        "the Chinchilla fits size 0.3 to 9.49e+15 tokens, got nan",
    ),
}


@pytest.mark.parametrize("name", TRAINING_STEP)
def test_a_training_step_or_budget_out_of_bounds_is_one_sentence(name, tmp_path, capsys):
    build, says = TRAINING_STEP[name]
    check(Place(tmp_path), build, says, capsys)


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_threads_and_workers_above_the_cores_are_capped_with_one_warning(
    tmp_path, caplog, monkeypatch, restore_threads
):
    """training.threads, training.data_workers and `data prepare --workers` beyond the cores: the cores are
    used, and one warning line says so; the command still succeeds."""
    import encdec.training.loader as loader

    cores, place, workers_used = available_cores(), Place(tmp_path), []
    real_loader = loader.DataLoader

    def recording_loader(*args, num_workers: int = 0, **kwargs):
        workers_used.append(num_workers)
        return real_loader(*args, **{**kwargs, "num_workers": 0, "prefetch_factor": None, "persistent_workers": False})

    monkeypatch.setattr(loader, "DataLoader", recording_loader)  # records the count, builds in this process
    caplog.set_level(logging.WARNING)
    assert main(train(place, "training.threads=3000", "training.data_workers=200")) == 0
    assert torch.get_num_threads() == cores and workers_used == [cores]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"training.threads is 3,000 but this machine has {cores} cores: using {cores}" in warnings
    assert f"training.data_workers is 200 but this machine has {cores} cores: using {cores}" in warnings

    caplog.clear()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("once upon a time\nthere was a girl\n")
    argv = ["data", "prepare", str(corpus), "--out", str(tmp_path / "shards"), "--format", "text", "--tokenizer"]
    argv += ["byte", "--workers", "300"]
    assert main(argv) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"--workers is 300 but this machine has {cores} cores: using {cores}"]
    assert os.path.isdir(tmp_path / "shards")
