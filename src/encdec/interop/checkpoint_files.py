"""A Hugging Face model directory's files, whatever its family: its weights read (model.safetensors, a sharded
safetensors index, or pytorch_model.bin loaded with `weights_only`, never unpickling code) and filled into a model
by a family's names, and a directory written. Every damaged file is one CheckpointError sentence."""

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from encdec.errors import CheckpointError
from encdec.models import ModelConfig
from encdec.models.weight_dtypes import dtype_problem
from encdec.models.weights_memory import check_weights_fit
from encdec.safe_paths import atomic_path, inside, output_dir, write_atomic


def read_hf_weights(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a Hugging Face model directory, never unpickling code; a damaged file is one sentence."""
    if (path / "model.safetensors").exists():
        return read_safetensors(path / "model.safetensors")
    if (path / "model.safetensors.index.json").exists():
        index_path = path / "model.safetensors.index.json"
        try:
            shards = sorted(set(json.loads(index_path.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise CheckpointError(f"{index_path} is not a safetensors index (a weight_map of shard names)") from None
        weights = {}
        for shard in shards:
            weights.update(read_safetensors(inside(path, shard, "weight shard", CheckpointError)))
        return weights
    if (path / "pytorch_model.bin").exists():
        return load_tensor_pickle(path / "pytorch_model.bin")
    raise CheckpointError(f"{path} holds no model.safetensors, safetensors index or pytorch_model.bin")


def load_tensor_pickle(file: Path) -> object:
    """What a torch.save file holds, read with weights_only (tensors and plain containers, never code); a file
    that holds anything else or is damaged is one CheckpointError sentence saying which, not torch's advice."""
    try:
        with warnings.catch_warnings():  # torch warns of a pickle protocol before it refuses the file
            warnings.simplefilter("ignore")
            return torch.load(file, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # unpickling refused (a pickle payload) or a truncated file
        code = "GLOBAL" in str(error) or "global" in str(error)  # weights_only names the class or function it refused
        kind = "carries pickled objects other than tensors" if code else "is corrupt or truncated"
        raise CheckpointError(f"{file} {kind}; refusing to load it") from None


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(file)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{file} is corrupt or truncated ({str(error)[:100]})") from None


def read_weights_with_shared(path: Path, prefix: str = "") -> dict[str, torch.Tensor]:
    """`read_hf_weights`, with the embedding both stacks share under `{prefix}shared.weight` also where a
    checkpoint keeps it only as the encoder's `embed_tokens`. A stack's own `embed_tokens` that differs from
    the shared table is one sentence: encdec's stacks read one table, and taking either would compute
    other logits without a word."""
    weights = read_hf_weights(path)
    if f"{prefix}shared.weight" not in weights and f"{prefix}encoder.embed_tokens.weight" in weights:
        weights[f"{prefix}shared.weight"] = weights[f"{prefix}encoder.embed_tokens.weight"]
    for side in ("encoder", "decoder"):
        table = weights.get(f"{prefix}{side}.embed_tokens.weight")
        if table is not None and not torch.equal(table, weights[f"{prefix}shared.weight"]):
            raise CheckpointError(
                f"{path}: {prefix}{side}.embed_tokens.weight differs from {prefix}shared.weight, which encdec's "
                "stacks share"
            )
    return weights


def check_hf_model_fits(cfg: ModelConfig, path: Path) -> None:
    """One sentence (CheckpointError) where the model a config.json describes cannot fit in the CPU's free
    memory, where it is built: before any weight is read or tensor made."""
    check_weights_fit(cfg, "cpu", error=CheckpointError, source=f"{path / 'config.json'}: ")


def fill_from_hf(model: nn.Module, weights: dict, rename, path: Path, reshaped: tuple[str, ...] = ()) -> nn.Module:
    """Load `weights` (Hugging Face names) into `model` by `rename`; a missing or misshapen one, or one stored in a
    dtype a weight is not (models.weight_dtypes), is one sentence.

    The `reshaped` names are stored in another shape than ours (BART's final_logits_bias is (1, V)).
    """
    state = {}
    for name, param in model.state_dict().items():
        key = rename(name)
        if key not in weights:
            raise CheckpointError(f"{path} lacks the weight {key}")
        tensor = weights[key].reshape(param.shape) if key in reshaped else weights[key]
        if tensor.shape != param.shape:
            raise CheckpointError(f"{path}: {key} has shape {tuple(tensor.shape)}, expected {tuple(param.shape)}")
        problem = dtype_problem(tensor, param)  # every family's weights, before torch would cast them in silence
        if problem:
            raise CheckpointError(f"{path}: {key} {problem}")
        state[name] = tensor
    model.load_state_dict(state)
    return model.eval()


def write_hf_directory(path: Path, weights: dict[str, torch.Tensor], hf_config: dict) -> None:
    """Write a Hugging Face model directory: the tensors as model.safetensors, the config as config.json."""
    output_dir(path, "--out")
    with atomic_path(path / "model.safetensors") as tmp:  # a new file renamed into place: a link is replaced
        save_file(weights, tmp, metadata={"format": "pt"})
    write_atomic(path / "config.json", json.dumps(hf_config, indent=2) + "\n")


def load_by_names(
    path: Path,
    hf_config: dict,
    config_from: Callable[..., ModelConfig],
    build: Callable[[ModelConfig], nn.Module],
    rename: Callable[[str], str],
    head: str = "lm_head.weight",
    table: str = "model.embed_tokens.weight",
    weights: dict[str, torch.Tensor] | None = None,
) -> nn.Module:
    """A directory whose token table is `table` and head `head` (Llama's, Gemma's, T5Gemma's), read by
    `config_from(hf_config, untied_head)` and `rename`: checked to fit before a weight is read, its head untied
    where `head` differs from the table (a tied checkpoint holds none); `weights`: already read."""
    check_hf_model_fits(config_from(hf_config, untied_head=True), path)
    weights = read_hf_weights(path) if weights is None else weights
    head_tensor, table_tensor = weights.get(head), weights.get(table)
    untied = head_tensor is not None and table_tensor is not None and not torch.equal(head_tensor, table_tensor)
    model = build(config_from(hf_config, untied))
    return fill_from_hf(model, weights, rename, path)
