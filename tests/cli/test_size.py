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
