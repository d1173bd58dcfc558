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
