"""training.init_from's weights are the source's: a model key beside it that changes the shape of any of them is
one sentence naming the key and both values, before the run directory is made or any data read (issue 58);
a key that changes no shape (dropout, norms.eps) goes on top of the source's."""

from pathlib import Path

import pytest
import yaml

from encdec.cli import main
from encdec.errors import ConfigError
from encdec.runs.load import load_run
from encdec.runs.model_section import ModelSection
from encdec.training.init_from import check_weights_fit, load_pretrained

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAST = ["--set", "training.steps=2", "--set", "output.save_interval=2", "--set", "evaluation.interval=2"]


def train(tiny_config, run, *sets: str) -> int:
    return main(["train", str(tiny_config), "--out", str(run), *FAST, *(a for s in sets for a in ("--set", s))])


def test_a_key_that_reshapes_the_source_s_weights_is_one_sentence_before_the_run_directory(
    tmp_path, tiny_config, capsys
):
    """The source is rot5-tiny with d_model 32, n_heads 4, n_kv_heads 2 (conftest's tiny config); a contradicting
    key used to end in torch's size mismatch after the run directory was made and the data read. Of several
    changed keys, the first that alone reshapes a weight is named (norms.eps comes before experts in a config)."""
    assert train(tiny_config, tmp_path / "source") == 0
    fine_tune = f"training.init_from={tmp_path / 'source'}"
    refusals = {
        ("model.d_model=64",): "model.d_model 64 contradicts training.init_from's model (d_model 32)",
        ("model.n_kv_heads=4",): "model.n_kv_heads 4 contradicts training.init_from's model (n_kv_heads 2)",
        ("model.family=decoder_only",): "model.family 'decoder_only' contradicts training.init_from's model "
        "(family 'encoder_decoder')",
        ("model.norms.eps=1e-5", "model.experts.count=2"): "model.experts.count 2 contradicts training.init_from's "
        "model (experts.count 1)",
    }
    for keys, said in refusals.items():
        capsys.readouterr()
        assert train(tiny_config, tmp_path / "tuned", fine_tune, *keys) == 2, keys
        err = capsys.readouterr().err
        assert err.endswith(f"encdec: error: {said}: its weights would not fit; drop the key or train from scratch\n")
        assert err.count("encdec: error:") == 1 and "Traceback" not in err
        assert not (tmp_path / "tuned").exists()  # refused before the run directory is made


def test_keys_that_change_no_shape_go_on_top_of_the_source_s_model(tmp_path, tiny_config):
    assert train(tiny_config, tmp_path / "source") == 0
    tuned = tmp_path / "tuned"
    sets = [f"training.init_from={tmp_path / 'source'}", "model.dropout=0.0", "model.norms.eps=1e-5"]
    assert train(tiny_config, tuned, *sets) == 0
    model = load_run(tuned, "latest").model.config
    assert (model.d_model, model.dropout, model.norms.eps) == (32, 0.0, 1e-5)
    written = yaml.safe_load((tuned / "config.yaml").read_text())["model"]
    assert written["dropout"] == 0.0 and written["norms"]["eps"] == 1e-5


def test_a_checkpoint_from_before_model_json_is_checked_with_stand_in_token_ids():
    """Its section leaves the vocabulary to the tokenizer, and nothing says the ids it was built with: both models
    are built with the same stand-ins, so a shape-free key passes and a width is refused as for any run."""
    pretrained = load_pretrained(str(FIXTURES / "checkpoint_2ba69c1" / "run"))
    check_weights_fit(ModelSection({"dropout": 0.0}, overlay=True).over(pretrained.model_section), pretrained)
    with pytest.raises(ConfigError, match=r"^model.d_ff 8 contradicts training.init_from's model \(d_ff 64\)"):
        check_weights_fit(ModelSection({"d_ff": 8}, overlay=True).over(pretrained.model_section), pretrained)
