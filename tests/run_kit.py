"""A tiny seq2seq run trained in a second: what tests of commands on a run (generate, export, serve, dtypes)
and of a run's reopened layout start from."""

from pathlib import Path

import yaml

from encdec.training import load_config, train

STORIES = (
    Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinystories" / "tinystories_train_head.txt.gz"
)
PAIRS = "red cat\tcat red\nblue dog\tdog blue\n" * 8
WORD_PAIRS = "".join(f"{a} {b}\t{b} {a}\n" for a in ("red", "green", "blue") for b in ("cat", "dog", "bird")) * 4
NINE_PAIRS = dict(pairs=WORD_PAIRS, val_fraction=0.1, training={"batch_size": 8, "seed": 7})  # the layout tests'


def tiny_pairs_run(
    root: Path,
    steps: int = 2,
    save_interval: int | None = None,
    *,
    preset: str = "t5-tiny",
    pairs: str = PAIRS,
    val_fraction: float = 0.25,
    training: dict | None = None,
    **model,
) -> Path:
    """`root`/run: `preset` narrowed (with `model`'s keys over it) trained `steps` steps (batches of 4 unless
    `training` says otherwise) on byte-tokenized `pairs` written to `root`/pairs.tsv, evaluated at its last
    step, saving every `save_interval` steps (default: at the end)."""
    (root / "pairs.tsv").write_text(pairs)
    config = {
        "model": {"preset": preset, "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0, **model},
        "tokenizer": {"kind": "byte", "num_sentinels": 0},
        "data": {"format": "tsv", "train": ["pairs.tsv"], "val_fraction": val_fraction},
        "objective": {"kind": "seq2seq", "max_source_len": 16, "max_target_len": 16},
        "training": {"steps": steps, "batch_size": 4, "threads": 1, "device": "cpu", **(training or {})},
        "evaluation": {"interval": steps, "steps": 1},
        "output": {"plot": False, "tensorboard": False, **({"save_interval": save_interval} if save_interval else {})},
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    train(load_config(root / "tiny.yaml"), root / "run")
    return root / "run"


def tiny_stories_run(root: Path, stories: Path, steps: int, save_interval: int, keep_last: int = 1) -> Path:
    """`root`/run: t5-tiny narrowed trained `steps` steps of UL2 on the first 60 of `stories` (TinyStories'
    format), byte tokenizer with 20 sentinels, evaluated at its last step, keeping the last `keep_last` of the
    checkpoints saved every `save_interval` steps."""
    config = {
        "model": {"preset": "t5-tiny", "d_model": 32, "n_heads": 4, "d_ff": 64},
        "tokenizer": {"kind": "byte", "num_sentinels": 20},
        "data": {"format": "tinystories", "train": [str(stories)], "val_fraction": 0.1, "max_documents": 60},
        "objective": {"kind": "ul2", "seq_len": 64},
        "training": {"steps": steps, "batch_size": 4, "seed": 7, "threads": 1, "device": "cpu"},
        "evaluation": {"interval": steps, "steps": 1},
        "output": {"save_interval": save_interval, "keep_last": keep_last, "plot": False},
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    train(load_config(root / "tiny.yaml"), root / "run")
    return root / "run"


def stories_data(max_documents: int) -> dict:
    """A run config's data section: the first `max_documents` stories of the shared TinyStories sample, a tenth of
    them held out."""
    return {"format": "tinystories", "train": [str(STORIES)], "val_fraction": 0.1, "max_documents": max_documents}


def config_beside_runs(tmp_path: Path, monkeypatch, run: str, text: str) -> Path:
    """tmp_path/configs/run.yaml holding `text`, beside a folder tmp_path/runs/`run`, with configs/ the working
    directory: a config that names a run by a path relative to its own folder (../runs/`run`)."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "runs" / run).mkdir(parents=True)
    config = tmp_path / "configs" / "run.yaml"
    config.write_text(text)
    monkeypatch.chdir(tmp_path / "configs")
    return config


def sets(*overrides: str) -> list[str]:
    """`--set KEY=VALUE` for each override, as a command line takes them."""
    return [arg for override in overrides for arg in ("--set", override)]
