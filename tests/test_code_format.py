"""The code is as the configured formatter (ruff format, pyproject.toml) writes it, and the linter's
undefined-name, unused-import and import-order checks pass."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src", "tests", "benchmarks", "scripts")


def ruff(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").is_file():
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    command = [sys.executable, "-m", "ruff", *args, *FOLDERS]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_code_is_formatted():
    result = ruff("format", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linter_finds_nothing():
    result = ruff("check")
    assert result.returncode == 0, result.stdout + result.stderr
