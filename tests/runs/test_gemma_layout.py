"""A checkpoint's model.json carries Gemma 2's settings (T5Gemma's layout: its norms, capped scores and logits,
the sliding window and the encoder's own token table), so the run reopens computing what it trained; a
model.json written before those keys existed opens as the model it was."""

import json
from pathlib import Path

import pytest
import torch
from model_kit import T5GEMMA
from run_kit import NINE_PAIRS, tiny_pairs_run

from encdec.models.config_specs import MOVED, SPECS, moved_to_specs
from encdec.runs import open_model
from encdec.runs.run_dir import RunDir

GEMMA = dict(T5GEMMA, attention_softcap=5.0, logit_softcap=8.0, global_every=3)
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
    """A seq2seq run of 2 steps of a tiny preset on nine word pairs, byte tokenizer, on the CPU."""
    return tiny_pairs_run(root, preset=preset, **NINE_PAIRS, **model)


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
    expected = moved_to_specs(GEMMA)  # the flat keys in their specs (rope_cross: cross_attention.rope), as written
    assert all(v.items() <= written[k].items() if isinstance(v, dict) else written[k] == v for k, v in expected.items())
    model = open_model(gemma_run).run.model
    assert model.encoder.embed is not model.decoder.embed and model.encoder.sliding == [True, True, False]
    again = open_model(gemma_run).run.model
    assert torch.equal(logits(model), logits(again))


def test_a_model_json_from_before_gemma_s_settings_opens_as_it_was(tmp_path):
    run_dir = run(tmp_path, "t5-v1.1-tiny")
    expected = open_model(run_dir).run.model
    model_json = RunDir(run_dir).checkpoint("latest").model_config
    written = json.loads(model_json.read_text())
    specs = {name: written.pop(name) for name in SPECS}  # written flat, as before the specs (MOVED)
    flat = written | {key: specs[place.split(".")[0]][place.split(".")[1]] for key, place in MOVED.items()}
    old = {k: v for k, v in flat.items() if k not in NEW_KEYS}
    model_json.write_text(json.dumps(old))
    reopened = open_model(run_dir).run.model
    assert reopened.config == expected.config
    assert torch.equal(logits(reopened), logits(expected))
