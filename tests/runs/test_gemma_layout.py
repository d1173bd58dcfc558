"""A checkpoint's model.json carries Gemma 2's settings (T5Gemma's layout: its norms, capped scores and logits,
the sliding window and the encoder's own token table), so the run reopens computing what it trained; a
model.json written before those keys existed opens as the model it was."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from encdec.runs import open_model
from encdec.runs.run_dir import RunDir
from encdec.training import load_config, train

PAIRS = [(f"{a} {b}", f"{b} {a}") for a in ("red", "green", "blue") for b in ("cat", "dog", "bird")]
GEMMA = dict(
    norm="gemma_rmsnorm",
    post_norms=True,
    activation="gated_gelu",
    rope_cross="none",
    scale_attention=True,
    attention_scale_dim=12,
    attention_softcap=5.0,
    logit_softcap=8.0,
    sliding_window=3,
    global_every=3,
    scale_embeddings=True,
    shared_embeddings=False,
)
NEW_KEYS = (  # the model.json keys Gemma 2's layout added
    "post_norms",
    "attention_scale_dim",
    "attention_softcap",
    "logit_softcap",
    "sliding_window",
    "global_every",
    "shared_embeddings",
)


def run(root: Path, preset: str, **model) -> Path:
    """A seq2seq run of 2 steps of a tiny preset, byte tokenizer, on the CPU."""
    (root / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS * 4))
    config = {
        "model": {"preset": preset, "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0, **model},
        "tokenizer": {"kind": "byte", "num_sentinels": 0},
        "data": {"format": "tsv", "train": ["pairs.tsv"], "val_fraction": 0.1},
        "objective": {"kind": "seq2seq", "max_source_len": 16, "max_target_len": 16},
        "training": {"steps": 2, "batch_size": 8, "seed": 7, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": 2, "steps": 1},
        "output": {"plot": False, "tensorboard": False},
    }
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    train(load_config(root / "run.yaml"), root / "run")
    return root / "run"


def logits(model) -> torch.Tensor:
    src = torch.randint(3, 200, (2, 14), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model.eval()(src, tgt).logits


@pytest.fixture(scope="module")
def gemma_run(tmp_path_factory) -> Path:
    return run(tmp_path_factory.mktemp("gemma"), "rot5-tiny", n_encoder_layers=3, **GEMMA)


def test_model_json_carries_gemma_s_settings_and_the_run_reopens_computing_the_same(gemma_run):
    written = json.loads(RunDir(gemma_run).checkpoint("latest").model_config.read_text())
    assert {key: written[key] for key in GEMMA} == GEMMA
    model = open_model(gemma_run).run.model
    assert model.encoder.embed is not model.decoder.embed and model.encoder.sliding == [True, True, False]
    again = open_model(gemma_run).run.model
    assert torch.equal(logits(model), logits(again))


def test_a_model_json_from_before_gemma_s_settings_opens_as_it_was(tmp_path):
    run_dir = run(tmp_path, "t5-v1.1-tiny")
    expected = open_model(run_dir).run.model
    model_json = RunDir(run_dir).checkpoint("latest").model_config
    old = {k: v for k, v in json.loads(model_json.read_text()).items() if k not in NEW_KEYS}
    model_json.write_text(json.dumps(old))
    reopened = open_model(run_dir).run.model
    assert reopened.config == expected.config
    assert torch.equal(logits(reopened), logits(expected))
