from pathlib import Path

import pytest

from encdec.cli import main


def test_size_of_a_preset_prints_its_parameter_counts(capsys):
    assert main(["size", "--preset", "rot5-mini"]) == 0
    out = capsys.readouterr().out
    assert "parameters:                    46,814,208" in out and "tokens D" in out


def test_size_of_the_tiny_config_counts_the_byte_tokenizer_vocabulary(capsys):
    assert main(["size", str(Path(__file__).parents[2] / "configs" / "tiny.yaml")]) == 0
    assert "vocabulary 360" in capsys.readouterr().out


def test_size_without_anything_to_size_is_one_sentence(capsys):
    assert main(["size"]) == 2
    assert "give a run config, --preset" in capsys.readouterr().err


@pytest.mark.parametrize(
    "key", ["model.d_ff", "model.encoder.d_ff", "model.encoder.max_positions", "model.encoder.d_head"]
)
def test_a_width_too_large_for_any_tensor_is_one_sentence_before_anything_is_built(key, capsys):
    """The estimate that refuses before building counts an encoder's own widths too (a fuzzed 2**52 of
    model.encoder.d_ff once reached torch's storage overflow inside the meta build)."""
    tiny = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    assert main(["size", str(tiny), "--set", f"{key}={2**52}", "--set", "model.preset=t5-small"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("encdec: error: the model would have about ") and error.count("\n") == 1


def test_size_of_any_family_s_config_json_is_transformers_count(tmp_path, capsys):
    """A config.json alone (no weights) of T5, BART, mBART, Marian and Pegasus, as mT5's, Switch's, NLLB's
    and T5Gemma's: the count transformers' model has (less Marian's and Pegasus' fixed sinusoid tables)."""
    import transformers

    shapes = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4)
    shapes |= dict(decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    configs = {
        "t5": transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4),
        "bart": transformers.BartConfig(vocab_size=128, **shapes),
        "mbart": transformers.MBartConfig(vocab_size=128, **shapes),
        "marian": transformers.MarianConfig(
            vocab_size=128, decoder_vocab_size=128, pad_token_id=127, decoder_start_token_id=127, **shapes
        ),
        "pegasus": transformers.PegasusConfig(vocab_size=128, **shapes),
    }
    for name, config in configs.items():
        model = transformers.AutoModelForSeq2SeqLM.from_config(config)
        fixed = {id(p) for m in model.modules() if "Sinusoidal" in type(m).__name__ for p in m.parameters()}
        count = sum(p.numel() for p in {id(p): p for p in model.parameters() if id(p) not in fixed}.values())
        config.save_pretrained(tmp_path / name)  # config.json alone
        assert main(["size", str(tmp_path / name / "config.json")]) == 0, name
        assert f"parameters:                    {count:,}" in capsys.readouterr().out, name


def test_size_of_a_run_that_starts_from_a_local_model_counts_that_model_as_training_builds_it(tmp_path, capsys):
    """training.init_from a local Hugging Face directory: fine-tuned, the count is that model's; with
    model.family encoder_decoder (an adaptation), the adapted model's, which train builds; a Hub id is not fetched
    and the config's own section is counted, said in a line."""
    import torch
    import transformers
    import yaml

    import encdec
    from encdec.models import ModelConfig, count_parameters
    from encdec.training.adaptation import adapted_section
    from encdec.training.init_from import model_section

    gemma = tmp_path / "gemma2"
    config = transformers.Gemma2Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=8,
    )
    with torch.device("meta"):
        reference = transformers.Gemma2ForCausalLM(config)
    config.save_pretrained(gemma)
    run = {"training": {"init_from": str(gemma)}, "model": {"dropout": 0.0}}
    (tmp_path / "fine.yaml").write_text(yaml.safe_dump(run))
    assert main(["size", str(tmp_path / "fine.yaml")]) == 0
    assert (
        f"parameters:                    {sum(p.numel() for p in reference.parameters()):,}\n"
        in capsys.readouterr().out
    )
    run["model"]["family"] = "encoder_decoder"
    (tmp_path / "adapt.yaml").write_text(yaml.safe_dump(run))
    assert main(["size", str(tmp_path / "adapt.yaml")]) == 0
    source = model_section(encdec.interop.from_hf.hf_model_config(gemma))
    with torch.device("meta"):
        adapted = encdec.build_model(ModelConfig.from_dict({**adapted_section(source), "vocab_size": 96}))
    assert f"parameters:                    {count_parameters(adapted):,}\n" in capsys.readouterr().out
    run["training"]["init_from"] = "google/flan-t5-small"
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(run))
    assert main(["size", str(tmp_path / "hub.yaml")]) == 0
    assert "is not a local directory (a size fetches nothing)" in capsys.readouterr().out
