"""What the bad-input tests (test_bad_inputs*.py) share: the shared data, a run config that trains in a second, a
snapshot of a tree, the one sentence a refusal is, and a passkey command line."""

import copy
import os
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
STORIES = SHARED / "tinystories" / "tinystories_train_head.txt.gz"
TINY = {
    "model": {"preset": "rot5-tiny", "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64, "dropout": 0.0},
    "tokenizer": {"kind": "byte", "num_sentinels": 20},
    "data": {"format": "tinystories", "train": [str(STORIES)], "val_fraction": 0.1, "max_documents": 60},
    "objective": {"kind": "ul2", "seq_len": 48},
    "optimizer": {"lr": 2e-3},
    "training": {"steps": 2, "batch_size": 4, "threads": 1, "device": "cpu"},
    "evaluation": {"interval": 2, "steps": 1},
    "output": {"save_interval": 2, "plot": False},
}


def tiny(**sections: dict) -> dict:
    """TINY with `sections` replacing its own (a fresh copy: a test may change it)."""
    return {**copy.deepcopy(TINY), **copy.deepcopy(sections)}


def progress(line: str) -> bool:
    """A training progress line: stderr is no terminal under pytest, so a run prints one per log interval in
    the bar's place; a refusal mid-run comes after them and is its own line."""
    return line.startswith("{'step': ")


def snapshot(root: Path) -> dict:
    """Every entry below root, links not followed: a file's bytes, a link's target."""
    return {
        p: ("link", os.readlink(p)) if p.is_symlink() else ("dir",) if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


def one_sentence(capsys) -> str:
    """The one line a refused command wrote on stderr (progress lines aside): `encdec: error: ...`, whole."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]
    assert len(lines) == 1 and lines[0].startswith("encdec: error: ") and len(lines[0]) < 300, err
    assert "Traceback" not in err, err
    return lines[0]


def passkey(corpus: str, out: str, *more: str) -> list[str]:
    """`encdec data passkey` of a text corpus, byte-tokenized, at one length of 256 into `out`, `more` after it."""
    return ["data", "passkey", corpus, *"--format text --tokenizer byte --lengths 256".split(), "--out", out, *more]
