"""Hugging Face Hub ids wherever a model is named: `org/name[@revision]` to a local snapshot directory.

    encdec.from_pretrained("google/flan-t5-small")            # downloaded once, then from the cache
    encdec.from_pretrained("google/flan-t5-small@0fc9ddf")    # a pinned commit, branch or tag
    training.init_from: google/flan-t5-small

A local directory of that name always wins. Otherwise huggingface_hub fetches the files a
model needs into its cache (HF_HOME, HF_HUB_CACHE), with its own download bars and its own
login (HF_TOKEN, `hf auth login`); with HF_HUB_OFFLINE=1 it reads the cache alone. Only
the config, tokenizer and safetensors weights are fetched; a repository that has no
safetensors gets its pytorch_model.bin, which is read with torch.load(weights_only=True)
(hf_t5.read_hf_weights), never unpickled. Every failure is one sentence (CheckpointError).
"""

import re
from pathlib import Path

from encdec.errors import CheckpointError

# org/name[@revision]: Hub names are letters, digits, - _ . (no leading dot); a revision may hold /
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(@(?P<revision>[\w./-]+))?")
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
    try:
        # online, .bin only where there are no safetensors; offline, the cache holds what was fetched
        has_safetensors = not huggingface_hub.constants.HF_HUB_OFFLINE and any(
            file.endswith(".safetensors") for file in huggingface_hub.list_repo_files(repo, revision=revision)
        )
        patterns = MODEL_FILES if has_safetensors else MODEL_FILES + PICKLED_WEIGHTS
        snapshot = huggingface_hub.snapshot_download(repo, revision=revision, allow_patterns=patterns)
    except errors.RevisionNotFoundError:
        raise CheckpointError(f"{where} the Hugging Face hub's {repo} has no revision {revision!r}") from None
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
            f"{where} {repo}{'@' + revision if revision else ''} is not in the Hugging Face cache "
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
