"""training.distill.share_encoder: a draft distilled from its target with the target's encoder, copied and frozen,
and a decoder of its own (the speculative draft recipe, configs/recipes/multi30k_draft.yaml)."""

from pathlib import Path

import pytest
import torch
import yaml
from run_kit import sets, stories_data

from encdec import generate
from encdec.cli import main
from encdec.runs.load import load_run

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "recipes"
CONFIG = {
    "model": {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0},
    "tokenizer": {"kind": "byte", "num_sentinels": 50},
    "data": stories_data(max_documents=60),
    "objective": {"kind": "ul2", "seq_len": 48},
    "optimizer": {"lr": 2e-3},
    "schedule": {"kind": "constant"},
    "training": {"steps": 3, "batch_size": 4, "seed": 7, "threads": 1, "device": "cpu"},
    "evaluation": {"interval": 3, "steps": 1},
    "output": {"save_interval": 3, "plot": False},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A target trained for 3 steps, and a draft of one decoder layer distilled from it with its encoder shared."""
    root = tmp_path_factory.mktemp("share")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    assert main(["train", str(config), "--out", str(root / "target")]) == 0
    draft = ["--set", f"training.distill.teacher={root / 'target'}", "--set", "training.distill.share_encoder=true"]
    assert main(["train", str(config), "--out", str(root / "draft"), *draft, "--set", "model.n_decoder_layers=1"]) == 0
    return load_run(root / "target").model, load_run(root / "draft").model


def test_the_draft_s_encoder_is_the_target_s_unchanged_by_training_beside_one_decoder_layer(runs):
    target, draft = runs
    assert len(draft.decoder.blocks) == 1
    theirs = target.encoder.state_dict()
    for name, tensor in draft.encoder.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name  # unchanged by 3 steps, and the target's


def test_the_distilled_draft_decodes_the_target_s_greedy_output_speculatively(runs):
    target, draft = runs
    src = torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(0))
    plain = generate(target, src, max_new_tokens=10)
    speculative = generate(target, src, max_new_tokens=10, assistant_model=draft, assistant_shares_encoder=True)
    assert torch.equal(speculative, plain)


def test_a_student_of_another_encoder_shape_is_one_sentence(runs, tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    target = tmp_path / "target"
    assert main(["train", str(config), "--out", str(target), "--set", "training.steps=1"]) == 0
    capsys.readouterr()
    sets = [f"training.distill.teacher={target}", "training.distill.share_encoder=true", "model.d_ff=48"]
    assert main(["train", str(config), "--out", str(tmp_path / "draft"), *(f"--set={s}" for s in sets)]) == 2
    err = capsys.readouterr().err
    assert "share_encoder copies the teacher's encoder into the student" in err and err.count("\n") == 1


def test_the_draft_recipe_distils_one_decoder_layer_over_the_multi30k_target_s_encoder(tmp_path, shared_data):
    m30k = shared_data / "translation" / "multi30k"
    pairs = lambda split: f"[{m30k / (split + '.en.gz')}, {m30k / (split + '.de.gz')}]"  # noqa: E731
    tiny = sets("training.steps=2", "evaluation.steps=1", "training.batch_size=4", "data.max_documents=200")
    tiny += sets("tokenizer.vocab_size=300", "model.preset=transformer-tiny", "evaluation.generate=2")
    tiny += sets("evaluation.max_new_tokens=4")
    tiny += sets(f"data.train={pairs('train')}", f"data.validation={pairs('val')}")
    target, draft = tmp_path / "target", tmp_path / "draft"
    assert main(["train", str(RECIPES / "multi30k_en_de.yaml"), "--out", str(target), *tiny]) == 0
    teacher = sets(f"training.distill.teacher={target}")
    assert main(["train", str(RECIPES / "multi30k_draft.yaml"), "--out", str(draft), *tiny, *teacher]) == 0
    target_model, draft_model = load_run(target).model, load_run(draft).model
    assert len(draft_model.decoder.blocks) == 1 < len(target_model.decoder.blocks)
    theirs = target_model.encoder.state_dict()
    assert all(torch.equal(tensor, theirs[name]) for name, tensor in draft_model.encoder.state_dict().items())
