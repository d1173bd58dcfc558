from pathlib import Path

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
