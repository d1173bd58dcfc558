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
