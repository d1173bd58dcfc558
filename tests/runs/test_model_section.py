"""A run config's model section is read once into the ModelConfig it describes (runs/model_section.py): a plain
`encdec train` builds it once, its tokenizer's ids give the same config a build with them would, and old YAML
configs and old checkpoints' config.yaml load into it and are saved back as written."""

from pathlib import Path

import pytest
import yaml

import encdec.runs.model_section as model_section
from encdec.errors import ConfigError
from encdec.runs.model_section import ModelSection, build_model_config
from encdec.training.run_config import RunConfig, load_config, save_config

ROOT = Path(__file__).resolve().parents[2]
OLD_CHECKPOINTS = [
    ROOT / "tests/fixtures/checkpoint_2ba69c1/run/checkpoints/step_00000030",
    ROOT / "tests/fixtures/runs_ad614a0/seq2seq/checkpoints/step_00000400",
]
SECTIONS = [
    {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64},
    {"preset": "rot5-tiny", "vocab_size": 300, "pad_id": 3},  # the section's own ids win over the tokenizer's
    {"family": "decoder_only", "d_model": 32, "n_heads": 2, "d_ff": 64, "max_positions": 64},
    {"preset": "rnn_seq2seq-tiny", "eos_id": 2},
    {},
]


@pytest.mark.parametrize("written", SECTIONS, ids=range(len(SECTIONS)))
@pytest.mark.parametrize("tokens", [(260, 0, 1, 0), (512, 1, 2, 3)])
def test_a_section_built_once_for_a_tokenizer_equals_a_build_with_its_ids(written, tokens):
    assert ModelSection(written).build(*tokens) == build_model_config(written, *tokens)


def test_a_plain_train_config_builds_its_model_section_once(monkeypatch, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": SECTIONS[0], "objective": {"kind": "span_corruption", "pack": True}}))
    built = []

    def counted(*args, **kwargs):
        built.append(args)
        return build_model_config(*args, **kwargs)

    monkeypatch.setattr(model_section, "build_model_config", counted)
    cfg = load_config(path)
    assert cfg.model.family == "encoder_decoder"  # the packing rule and the objective's read the built config
    assert cfg.model.build(260, 0, 1, 0).d_model == 32
    assert len(built) == 1


def test_a_fine_tuning_overlay_is_built_only_on_the_pretrained_section():
    overlay = ModelSection({"dropout": 0.0}, overlay=True)
    assert overlay.config is None and overlay.family == "encoder_decoder"
    with pytest.raises(ConfigError, match="built on the pretrained"):
        overlay.build(260, 0, 1, 0)
    merged = overlay.over(SECTIONS[0])
    assert merged == {**SECTIONS[0], "dropout": 0.0} and merged.build(260, 0, 1, 0).dropout == 0.0


@pytest.mark.parametrize("checkpoint", OLD_CHECKPOINTS, ids=lambda p: p.parts[-4])
def test_an_old_checkpoint_s_config_loads_and_saves_its_model_section_as_written(checkpoint, tmp_path):
    written = yaml.safe_load((checkpoint / "config.yaml").read_text())["model"]
    cfg = load_config(checkpoint / "config.yaml", paths_from_file=False)
    assert isinstance(cfg.model, ModelSection) and cfg.model == written
    save_config(cfg, tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model"] == written
    again = load_config(tmp_path / "config.yaml", paths_from_file=False)
    assert again.to_dict() == cfg.to_dict()


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_holds_its_model_section_as_written(path):
    cfg = load_config(path)
    assert dict(cfg.model) == (yaml.safe_load(path.read_text()).get("model") or {})


def test_a_config_built_in_python_takes_a_mapping_and_refuses_anything_else():
    assert RunConfig(model={"preset": "t5-tiny"}).model.config.d_model == 64
    with pytest.raises(ConfigError, match="model must be a mapping"):
        RunConfig(model=5)
