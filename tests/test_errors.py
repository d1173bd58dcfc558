"""A refusal that lists things stays one whole sentence: the list is bounded (errors.listed, errors.Unmet),
and the command line's one line (cli.one_line) never cuts a word of the reasons."""

import pytest

from encdec.cli import MAX_LINE, MAX_WORD, main, one_line
from encdec.cli import size as size_command
from encdec.errors import MAX_SENTENCE, ConfigError, Unmet, listed

CLAUSES = [f"setting_{i} must be value_{i}" for i in range(40)]


def test_a_list_keeps_whole_items_within_its_budget_and_counts_the_rest():
    text = listed(CLAUSES, "; ", budget=100)
    shown, _, rest = text.rpartition("; and ")
    assert len(text) <= 100 and rest.endswith(" more")
    assert shown.split("; ") == CLAUSES[: len(shown.split("; "))]  # whole items, in their order
    assert int(rest.split()[0]) == len(CLAUSES) - len(shown.split("; "))


def test_a_short_list_is_said_whole_and_a_long_first_item_alone():
    assert listed(["a", "b", "c"]) == "a, b, c"
    assert listed(["x" * 200, "b"], budget=50) == "x" * 200 + ", and 1 more"


@pytest.mark.parametrize("count", [1, 3, 12, 40])
def test_unmet_requirements_make_one_sentence_that_fits_whole(count):
    error = Unmet("this model cannot be saved as Hugging Face Llama: {unmet}", CLAUSES[:count])
    said = str(error)
    assert len(said) <= MAX_SENTENCE and said.startswith("this model cannot be saved as Hugging Face Llama: ")
    assert said.removeprefix("this model cannot be saved as Hugging Face Llama: ").startswith(CLAUSES[0])
    reworded = error.reworded("{said} (the layouts that export); encdec.from_pretrained(RUN_DIR) loads it")
    assert len(str(reworded)) <= MAX_SENTENCE and str(reworded).endswith("); encdec.from_pretrained(RUN_DIR) loads it")
    assert isinstance(reworded, ConfigError) and reworded.unmet == CLAUSES[:count]


def test_the_sentence_fits_the_command_line_s_one_line():
    assert len("encdec: error: ") + MAX_SENTENCE <= MAX_LINE


LONG = {  # a refusal too long for one line -> what it must keep whole at its end
    "a long value": ("data file /" + "d" * 5000 + "/stories.txt does not exist; set data.train", "set data.train"),
    "many words": (
        "this model cannot be saved: " + "; ".join(CLAUSES) + "; encdec.from_pretrained(RUN_DIR) loads it",
        "encdec.from_pretrained(RUN_DIR) loads it",
    ),
    "a value and many words": ("x" * 10_000 + " " + " ".join(CLAUSES), CLAUSES[-1]),
    "lines and spaces": ("first\nsecond\r\n\t" + "word " * 300 + "the reason", "the reason"),
}


@pytest.mark.parametrize("name", LONG)
def test_a_long_refusal_ends_intact_and_no_word_of_its_reasons_is_cut(name):
    message, end = LONG[name]
    line = one_line(message)
    assert len(line) <= MAX_LINE and "\n" not in line and line.endswith(end), line
    words = set(message.split())
    for word in line.split():  # each word is the message's, whole, or a long value cut about "..."
        assert word in words or (word == "...") or ("..." in word and len(word) >= MAX_WORD), word


def test_a_line_that_fits_is_left_as_it_is():
    assert one_line("a  short\nrefusal") == "a short refusal"


def test_the_command_line_prints_a_long_listed_refusal_whole(monkeypatch, capsys):
    def refuses(args):
        raise Unmet("this model cannot be saved as Hugging Face T5: {unmet}", CLAUSES)

    monkeypatch.setattr(size_command, "run", refuses)
    code = main(["size", "--tokens", "1e9"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0] == "encdec: error: " + str(Unmet("this model cannot be saved as Hugging Face T5: {unmet}", CLAUSES))
    assert lines[0].endswith(" more") and "..." not in lines[0]


def test_unmet_requirements_cross_to_another_process_as_made():
    import pickle

    error = Unmet("cannot: {unmet}", CLAUSES)
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.unmet == CLAUSES


# raise sites whose joined list is short by construction, not a declared constant: the list and why it is short
SHORT_BY_CONSTRUCTION = {
    "data/objectives/ul2.py": "missing: of the three UL2 mode tokens",
    "interop/gemma/gemma_layout.py": "allowed: one or two RoPE types",
    "interop/switch/__init__.py": "ours: the declared expert activations",
    "schema/values.py": "args: a Literal's declared choices",
}


def test_every_refusal_that_joins_a_list_it_did_not_declare_bounds_it():
    """Walk every user error raised in the package: a list joined into its sentence is a declared constant (a
    table of choices, upper case) or is bounded by errors.listed / Unmet, so no sentence grows with its data."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "encdec"
    unbounded = []
    for path in sorted(src.rglob("*.py")):
        where = str(path.relative_to(src))
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            for call in ast.walk(node.exc):
                if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "join" and call.args):
                    continue
                names = [n.id for n in ast.walk(call.args[0]) if isinstance(n, ast.Name)]
                declared = any(name.isupper() for name in names)
                if not declared and where not in SHORT_BY_CONSTRUCTION:
                    unbounded.append(f"{where}:{node.lineno}: {ast.unparse(call)[:80]}")
    assert unbounded == []
