"""One style for every message a user reads: a sentence that starts in lower case (names keep
their own case: RoPE, SentencePiece) and ends without a full stop, as `encdec: error: ...` prints it."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "encdec"
USER_ERRORS = {"EncdecError", "ConfigError", "DataError", "CheckpointError", "Unmet"}


def messages():
    """(where, text) of the literal start and end of every user error raised in the package."""
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            func = node.exc.func
            if getattr(func, "id", getattr(func, "attr", None)) not in USER_ERRORS:
                continue
            parts = [node.exc.args[0]]
            while isinstance(parts[0], ast.BinOp):  # "..." + "..." or implicit concatenation
                parts = [parts[0].left, parts[0].right]
            first = parts[0].values[0] if isinstance(parts[0], ast.JoinedStr) else parts[0]
            last = node.exc.args[0].values[-1] if isinstance(node.exc.args[0], ast.JoinedStr) else node.exc.args[0]
            where = f"{path.relative_to(SRC)}:{node.lineno}"
            yield where, getattr(first, "value", None), getattr(last, "value", None)


def test_every_user_error_starts_in_lower_case_unless_with_a_name():
    capitalised = []
    for where, start, _ in messages():
        word = start.split(" ")[0] if isinstance(start, str) and start else ""
        if word[:1].isupper() and not any(c.isupper() for c in word[1:]):  # "Tokenizer", not "RoPE" or "UL2"
            capitalised.append(f"{where}: {start[:40]!r}")
    assert capitalised == []


def test_no_user_error_ends_with_a_full_stop():
    stopped = [
        f"{where}: ...{end[-30:]!r}"
        for where, _, end in messages()
        if isinstance(end, str) and end.rstrip().endswith(".") and not end.rstrip().endswith("..")
    ]
    assert stopped == []
