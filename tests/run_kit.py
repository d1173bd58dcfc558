"""A tiny seq2seq run trained in a second: what tests of commands on a run (generate, export, serve, dtypes)
start from."""

from pathlib import Path

import yaml

from encdec.training import load_config, train

PAIRS = "red cat\tcat red\nblue dog\tdog blue\n" * 8


def tiny_pairs_run(root: Path, steps: int = 2, save_interval: int | None = None, **model) -> Path:
    """`root`/run: t5-tiny narrowed (with `model`'s keys over it) trained `steps` steps on byte-tokenized pairs
    of `root`/pairs.tsv, evaluated at its last step, saving every `save_interval` steps (default: at the end)."""
    (root / "pairs.tsv").write_text(PAIRS)
    config = {
        "model": {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0, **model},
        "tokenizer": {"kind": "byte", "num_sentinels": 0},
        "data": {"format": "tsv", "train": ["pairs.tsv"], "val_fraction": 0.25},
        "objective": {"kind": "seq2seq", "max_source_len": 16, "max_target_len": 16},
        "training": {"steps": steps, "batch_size": 4, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": steps, "steps": 1},
        "output": {"plot": False, "tensorboard": False, **({"save_interval": save_interval} if save_interval else {})},
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    train(load_config(root / "tiny.yaml"), root / "run")
    return root / "run"
