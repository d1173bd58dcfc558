"""Hugging Face Hub ids wherever a model is named: `org/name[@revision]` to a local snapshot directory.

    encdec.from_pretrained("google/flan-t5-small")            # downloaded once, then from the cache
    encdec.from_pretrained("google/flan-t5-small@0fc9ddf")    # a pinned commit, branch or tag
    training.init_from: google/flan-t5-small

A local directory of that name always wins. Otherwise huggingface_hub fetches the files a
model needs into its cache (HF_HOME, HF_HUB_CACHE), with its own download bars and its own
login (HF_TOKEN, `hf auth login`); with HF_HUB_OFFLINE=1 it reads the cache alone, and a revision
is taken exactly as the cache holds it (`cached_commit`: a commit under snapshots/, or a branch or
tag under refs/ naming one) or refused, never read as the snapshot that happens to be there. Only
the config, tokenizer and safetensors weights are fetched; a repository that has no
safetensors gets its pytorch_model.bin, which is read with torch.load(weights_only=True)
(checkpoint_files.read_hf_weights), never unpickled. Every failure is one sentence (CheckpointError).
"""

import re
from pathlib import Path

from encdec.data.hub import HUB_NAME, named_commit
from encdec.errors import CheckpointError

# org/name[@revision]: Hub names are letters, digits, - _ . (no leading dot); a revision may hold /
HUB_ID = re.compile(rf"(?P<repo>{HUB_NAME}/{HUB_NAME})(@(?P<revision>[\w./-]+))?")
MODEL_FILES = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "source.spm",
    "target.spm",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
]
PICKLED_WEIGHTS = ["pytorch_model.bin"]  # only where a repository has no safetensors


def hub_id(name: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) where `name` has the form of a Hub id, else None."""
    match = HUB_ID.fullmatch(name)
    return (match["repo"], match["revision"]) if match else None


def resolve_model(name: str | Path, label: str = "") -> Path:
    """`name` as a local path: itself where it exists or is no Hub id, else its snapshot in the Hub cache,
    fetched if need be. `label` starts each sentence (the option that named it)."""
    path = Path(name)
    parsed = None if path.exists() else hub_id(str(name))
    if parsed is None:
        return path
    repo, revision = parsed
    import huggingface_hub
    import huggingface_hub.constants  # not loaded by the package itself
    from huggingface_hub import errors

    where = f"{label}{name} is not a local directory, and"
    asked = revision
    if huggingface_hub.constants.HF_HUB_OFFLINE and revision is not None:
        revision = cached_commit(Path(huggingface_hub.constants.HF_HUB_CACHE), repo, revision, where)
    try:
        # online, .bin only where there are no safetensors; offline, the cache holds what was fetched
        has_safetensors = not huggingface_hub.constants.HF_HUB_OFFLINE and any(
            file.endswith(".safetensors") for file in huggingface_hub.list_repo_files(repo, revision=revision)
        )
        patterns = MODEL_FILES if has_safetensors else MODEL_FILES + PICKLED_WEIGHTS
        snapshot = huggingface_hub.snapshot_download(repo, revision=revision, allow_patterns=patterns)
    except errors.RevisionNotFoundError:
        raise CheckpointError(f"{where} the Hugging Face hub's {repo} has no revision {asked!r}") from None
    except errors.GatedRepoError:
        raise CheckpointError(
            f"{where} {repo} on the Hugging Face hub is gated: accept its terms on the Hub and log in (hf auth login)"
        ) from None
    except errors.RepositoryNotFoundError:
        raise CheckpointError(
            f"{where} the Hugging Face hub has no model {repo} (or it is private and you are not logged in)"
        ) from None
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled):
        raise CheckpointError(
            f"{where} {repo}{'@' + asked if asked else ''} is not in the Hugging Face cache "
            "(HF_HUB_OFFLINE is set, or the Hub cannot be reached)"
        ) from None
    except errors.HfHubHTTPError as error:
        raise CheckpointError(f"{where} the Hugging Face hub refused {repo}: {str(error).splitlines()[0]}") from None
    except Exception as error:  # no network, DNS, a timeout, a full disk
        raise CheckpointError(
            f"{where} {repo} cannot be fetched from the Hugging Face hub ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); with a copy in the cache, set HF_HUB_OFFLINE=1"
        ) from None
    return Path(snapshot)


def cached_commit(cache: Path, repo: str, revision: str, where: str) -> str:
    """The commit `revision` of model `repo` names in the Hub cache `cache`, read offline (data.hub's
    `named_commit`: a full commit hash, or a branch or tag under refs/), whose snapshot the cache holds;
    anything else is one sentence (`where` starts it): offline, nothing else could resolve it."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    commit = named_commit(folder / "refs", revision)
    snapshot = folder / "snapshots" / commit if commit else None
    if snapshot is None or not snapshot.is_dir() or snapshot.is_symlink():
        raise CheckpointError(
            f"{where} {repo}@{revision} names no commit, branch or tag in the Hugging Face cache (HF_HUB_OFFLINE "
            "is set, so a revision is read from the cache alone)"
        )
    return commit
