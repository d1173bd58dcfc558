"""`encdec CMD --help`: a subcommand's examples keep one line each, as its docstring writes them."""

import pytest

from encdec.cli import main


@pytest.mark.parametrize(
    "command, example",
    [("size", "encdec size --preset rot5-mini"), ("compare", "encdec compare"), ("attention", "encdec attention")],
)
def test_help_examples_stay_one_to_a_line(command, example, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    lines = capsys.readouterr().out.splitlines()
    examples = [line for line in lines if line.strip().startswith(example)]
    assert examples and all(line.strip().startswith("encdec ") for line in examples)
    assert not any("encdec size configs/tiny.yaml" in line and "--preset" in line for line in lines)


def imported_by(*argv: str) -> set[str]:
    """The modules a fresh `encdec ARGV` process has imported when it exits."""
    import subprocess
    import sys

    code = "import sys\nfrom encdec.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    code += "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    return set(done.stderr.splitlines()[-1].split())


def test_the_command_list_imports_no_subcommand_and_no_torch():
    """`encdec --help` lists every subcommand with its help from one table, importing none of them."""
    from encdec.cli import SUBCOMMANDS

    modules = imported_by("--help")
    assert "torch" not in modules and not {f"encdec.cli.{module}" for module, _ in SUBCOMMANDS.values()} & modules


def test_chinchilla_sizing_imports_no_torch():
    assert "torch" not in imported_by("size", "--tokens", "1e9")


def test_a_preset_is_counted_as_its_built_model_without_torch_s_compiler(capsys):
    """`encdec size --preset` counts the model built on the meta device, without its weight init or fixed tables'
    values, so a fresh process imports no torch._dynamo (a second torch's meta kernels would cost), and says the
    count of the model build_model makes, position tables and all."""
    assert "torch._dynamo" not in imported_by("size", "--preset", "rot5-mini")
    from encdec.models import build_model, count_parameters, preset

    main(["size", "--preset", "rot5-mini"])
    out = capsys.readouterr().out
    model = build_model(preset("rot5-mini"))
    assert f"parameters:                    {count_parameters(model):,}" in out
    assert f"without position embeddings:   {count_parameters(model, exclude_positions=True):,}" in out


def test_a_family_s_refusal_is_said_by_size_as_build_model_says_it(tmp_path, capsys):
    """What a family refuses (here a decoder deeper than the parallel family's encoder) is the same
    sentence from `encdec size`, which builds on the meta device, as from building."""
    from pathlib import Path

    import yaml

    from encdec.errors import ConfigError
    from encdec.models import build_model, preset

    configs = Path(__file__).parents[2] / "configs"
    config = yaml.safe_load((configs / "tiny.yaml").read_text())
    for split in ("train", "validation"):  # the copy lies elsewhere: its data paths made absolute
        if config["data"].get(split):
            config["data"][split] = [str((configs / path).resolve()) for path in config["data"][split]]
    model = {"family": "parallel_encdec", "position": "rope", "rope_cross": "none"}
    config["model"] = {"preset": "rot5-tiny", **model, "n_encoder_layers": 1, "n_decoder_layers": 2}
    path = tmp_path / "deep.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["size", str(path)]) != 0
    said = capsys.readouterr().err
    with pytest.raises(ConfigError) as built:
        build_model(preset("rot5-tiny", **model, n_encoder_layers=1, n_decoder_layers=2))
    assert str(built.value) in said


def test_each_subcommand_is_listed_with_the_help_its_parser_carries(capsys):
    """The full parser (every subcommand declared) and the command list show the same help for each."""
    from encdec.cli import SUBCOMMANDS, build_parser

    full = build_parser()
    choices = next(action for action in full._actions if action.dest == "command")._choices_actions
    assert {action.dest: action.help for action in choices} == {name: help for name, (_, help) in SUBCOMMANDS.items()}
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = capsys.readouterr().out
    assert all(name in listing for name in SUBCOMMANDS)
