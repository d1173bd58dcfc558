"""A tiny run config on the real TinyStories sample, fast enough for many runs per test."""

import pytest
import yaml


@pytest.fixture
def tiny_config(tmp_path, shared_data, device):
    """Write a tiny UL2 run config on the device under test and return its path; tests override fields with --set."""
    stories = shared_data / "tinystories"
    config = {
        "model": {"preset": "rot5-tiny", "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64, "dropout": 0.1},
        "tokenizer": {"kind": "byte", "num_sentinels": 50},
        "data": {
            "format": "tinystories",
            "train": [str(stories / "tinystories_train_head.txt.gz")],
            "val_fraction": 0.1,
            "max_documents": 120,
        },
        "objective": {"kind": "ul2", "seq_len": 64},
        "optimizer": {"lr": 2e-3},
        "training": {"steps": 12, "batch_size": 4, "seed": 7, "threads": 1, "device": device.type},
        "evaluation": {"interval": 6, "steps": 1},
        "output": {"save_interval": 2, "keep_last": 3, "plot": False},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
