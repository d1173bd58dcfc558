"""scripts/import_structure.py, which draws docs/architecture.md's import structure: its counts are the tree's
own, and a revision that is not one is one sentence."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import_structure.py"


def in_git() -> bool:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not in_git(), reason="the script reads the sources from git")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_counts_are_the_trees_own():
    result = run("--read", "t5")
    assert result.returncode == 0, result.stderr
    tracked = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "HEAD", "src/encdec"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    modules = sum(path.endswith(".py") for path in tracked)
    assert f": {modules} modules," in result.stdout
    table = [line for line in result.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert sum(int(row.split("|")[2]) for row in table) == modules
    assert "| models |" in result.stdout and "models -->|" in result.stdout
    edges = [line.split() for line in result.stdout.splitlines() if "-->|" in line]
    importers_of_cli = {source for source, arrow, target in edges if target == "cli"}
    assert importers_of_cli == {"__main__"}  # nothing but the entry point imports the command line
    assert "lines in all." in result.stdout


def test_a_revision_that_is_not_one_is_one_sentence():
    result = run("--rev", "no-such-revision")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: 'no-such-revision' is not a revision of this repository"


def test_the_readmes_reading_figures_are_the_scripts_within_a_tenth():
    """The README's opening says how many lines the package is and how many a reader reads for T5; both are
    the script's counts (round figures, within 10%), so the claim moves when the code does."""
    import re

    opening = (ROOT / "README.md").read_text().split("## ")[0].replace("\n", " ")
    claimed = re.search(r"about ([\d,]+) lines; T5 .*? is about ([\d,]+) of them, in the (\d+) files", opening)
    assert claimed, "the README's opening states the package's lines and T5's reading"
    package, t5, files = (int(group.replace(",", "")) for group in claimed.groups())
    result = run("--read", "t5")
    total = int(re.search(r"modules, (\d+) lines\.", result.stdout).group(1))
    reading = int(re.search(r"(\d+) lines in all\.", result.stdout).group(1))
    listed = sum(line.startswith("- src/") for line in result.stdout.splitlines())
    assert abs(total - package) <= package / 10, (total, package)
    assert abs(reading - t5) <= t5 / 10, (reading, t5)
    assert "not at this revision" not in result.stdout  # every file the reading lists exists
    assert listed == files, (listed, files)


def test_inside_a_package_its_parts_are_drawn_and_counted():
    result = run("--inside", "interop")
    assert result.returncode == 0, result.stderr
    tracked = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "HEAD", "src/encdec/interop"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    parts = [path for path in tracked if path.endswith(".py") and path != "src/encdec/interop/__init__.py"]
    assert f": {len(parts)} modules," in result.stdout
    edges = {tuple(line.split()[::2]) for line in result.stdout.splitlines() if "-->|" in line}
    assert ("from_hf", "families") in edges  # loading reads the registry
