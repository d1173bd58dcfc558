"""Offline Hugging Face caches laid out by the tests as a download would leave them, under one HF_HOME:

    HF_HOME/hub/models--org--name/refs/main, snapshots/<commit>/...     (huggingface_hub's model cache)
    HF_HOME/datasets/org___snake_name/default/0.0.0/<commit>/*.arrow          (`datasets`' prepared dataset cache)

With HF_HUB_OFFLINE=1, `datasets.load_dataset("org/name")` and encdec's Hub ids read these and ask no network.
"""

import shutil
import tempfile
from pathlib import Path

COMMIT = "c" * 40


def cache_hub_dataset(
    hf_home: Path, repo_id: str, files: dict[str, Path], builder: str = "json", commit: str = COMMIT
) -> Path:
    """Prepare `files` ({split: data file}) with the `datasets` builder `builder` and put the result
    where `datasets` keeps the Hub dataset `repo_id` it downloaded at `commit`; returns that directory."""
    import datasets
    from datasets.naming import camelcase_to_snakecase

    module = {"json": "json.json.Json", "csv": "csv.csv.Csv", "parquet": "parquet.parquet.Parquet"}[builder]
    package, name = module.rsplit(".", 1)
    builder_class = getattr(__import__(f"datasets.packaged_modules.{package}", fromlist=[name]), name)
    namespace, dataset = repo_id.split("/")
    with tempfile.TemporaryDirectory() as scratch:
        prepared = builder_class(
            cache_dir=scratch, dataset_name=dataset, data_files={s: str(f) for s, f in files.items()}
        )
        prepared.download_and_prepare()
        folder = f"{namespace}___{camelcase_to_snakecase(dataset)}"  # as datasets names it: TinyStories -> tiny_stories
        target = Path(hf_home) / "datasets" / folder / "default" / "0.0.0" / commit
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(prepared.cache_dir, target)
    assert datasets.__version__  # the library that reads it back is the one that wrote it
    return target


def cache_hub_model(hf_home: Path, repo_id: str, export) -> Path:
    """A model snapshot of `repo_id` on branch main, written by `export(directory)`; returns the snapshot."""
    repo = Path(hf_home) / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    export(snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot
