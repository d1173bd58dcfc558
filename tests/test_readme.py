"""The README's Python block runs as written: a newcomer can paste it."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_python_block_runs_as_written(tmp_path, monkeypatch):
    section = README.read_text().split("## Using it from Python", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # it writes ./exported
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    out = namespace["out"]
    assert out.sequences.shape[0] == 2 and len(out.scores) == out.sequences.shape[1] - 1
    assert (tmp_path / "exported" / "config.json").is_file()
