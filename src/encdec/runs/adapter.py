"""A LoRA run's checkpoints: the adapter alone, beside a pointer to the base it adapts.

    checkpoints/step_N/model.safetensors   the parameters that train: adapters (and training.train_only's)
    checkpoints/step_N/base.json           {"init_from", "kind", "source", "sha256"}: where the base is, and
                                           a hash of its weights, so that a changed base is refused
                                           rather than silently adapted
    checkpoints/step_N/adapter.json        {"lora": {r, lora_alpha, ...}, "train_only": [...]}: the adapters'
                                           shape and what trains (AdapterConfig), from the run's config

`load_adapted` rebuilds the model a LoRA checkpoint describes: the base's weights, peft's layers on the
layers its AdapterConfig names, then the checkpoint's weights over them. Training (set_up, on a resume)
and reading a run back (load_run) both go through it.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import torch
from torch import nn

from encdec.errors import CheckpointError
from encdec.interop import load_hf
from encdec.interop.hub_ids import resolve_model
from encdec.interop.peft_adapter import hf_module_names
from encdec.models.lora import add_lora, train_only
from encdec.models.name_patterns import NamePatterns
from encdec.models.weight_dtypes import dtype_problem
from encdec.runs.checkpoint import load_state, load_weights
from encdec.runs.pointer import NAME, SHA256, SOURCE, read_pointer, weights_sha256
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.schema import Range

log = logging.getLogger(__name__)
TRAIN_ONLY = Annotated[list[str], NamePatterns()]  # globs of parameter names that train (training.train_only)


@dataclass
class BasePointer:
    """What base.json holds: the base a LoRA run adapts."""

    init_from: NAME  # as the config named it: a run directory, a Hugging Face directory or a Hub id
    kind: Literal["run", "hf"]
    source: SOURCE  # the checkpoint directory of a run, or the Hugging Face directory, that was read (real path)
    sha256: SHA256  # of the base's weights (runs.pointer.weights_sha256)


@dataclass
class LoraSection:
    """LoRA adapters (Hu et al. 2021), in peft's own field names; the base model is frozen (see encdec.models.lora
    for how target_modules picks layers by name: encdec's, or the Hugging Face family's that peft uses)."""

    r: Annotated[int, Range(1, 1 << 16)] = 8  # the adapters' rank
    lora_alpha: Annotated[float, Range(0, 1e6, above=True)] = 16.0  # the update is scaled by lora_alpha / r
    lora_dropout: Annotated[float, Range(0, 1, below=True)] = 0.0  # dropout on the adapter's input
    # names, or one regular expression of the subset encdec.models.name_patterns matches in bounded steps
    target_modules: Annotated[str | list[str], NamePatterns(regex=True)] = field(default_factory=lambda: ["q", "v"])


@dataclass
class AdapterConfig:
    """What adapter.json holds: what puts a LoRA checkpoint's weights on its base (the run's lora section and
    training.train_only, which say which parameters the checkpoint holds)."""

    lora: LoraSection
    train_only: TRAIN_ONLY = field(default_factory=list)


def read_base(checkpoint: CheckpointDir) -> BasePointer | None:
    """The checkpoint's base pointer; None for a checkpoint of the whole model."""
    return read_pointer(checkpoint.base, BasePointer, "base pointer")


def base_weights(pointer: BasePointer) -> dict[str, torch.Tensor]:
    """The base's weights, from where training read them (else init_from again), refused in one sentence
    when their hash is not the one the run trained against."""
    source = Path(pointer.source)
    if not source.exists():
        source = resolve_model(pointer.init_from, "the base ")
        if not source.exists():  # a checkpoint copied away from both
            raise CheckpointError(
                f"the base this adapter goes on is unreachable: base.json names {pointer.source} and "
                f"{pointer.init_from}, and neither is there"
            )
        if pointer.kind == "run":
            source = RunDir(source).checkpoint("best").path
    if pointer.kind == "hf":
        weights = load_hf(source).state_dict()
    else:
        weights = load_weights(CheckpointDir(source).model)
    found = weights_sha256(weights)
    if found != pointer.sha256:
        raise CheckpointError(
            f"the base {source} has changed since this adapter was trained (its weights hash to {found[:12]}, "
            f"not {pointer.sha256[:12]})"
        )
    return weights


def apply_lora(model: nn.Module, lora: LoraSection | None, trained: list[str]) -> None:
    """LoRA adapters of `lora` and the parameters `trained` names (training.train_only) on `model`, its base
    weights already loaded."""
    if lora is not None:
        aliases = hf_module_names(model)  # the family's peft names (q_proj, fc1, ...) pick layers too
        targets = add_lora(model, lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules, aliases)
        log.info("LoRA r=%d on %d layers", lora.r, len(targets))
    if trained or lora is not None:
        train_only(model, trained)


def load_adapted(model: nn.Module, adapter: AdapterConfig, checkpoint: CheckpointDir, weights: dict) -> None:
    """`model` (as the checkpoint's model config builds it) made what LoRA checkpoint `checkpoint` holds: its
    base's weights, the adapters, then the checkpoint's `weights` (every one a trainable parameter, none missing)."""
    pointer = read_base(checkpoint)
    if pointer is None:
        raise CheckpointError(f"{checkpoint.path} holds an adapter but no {CheckpointDir.BASE} naming its base")
    load_state(model, base_weights(pointer), f"the base {pointer.source} does not fit the run's model section")
    apply_lora(model, adapter.lora, adapter.train_only)
    expected = {n for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or extra:
        detail = f"lacks {missing[0]}" if missing else f"holds {extra[0]}, which is not an adapter parameter"
        raise CheckpointError(f"{checkpoint.model} does not hold this run's adapter (it {detail})")
    state = model.state_dict()
    for name, tensor in weights.items():  # as every weight is checked (models.weight_dtypes)
        problem = dtype_problem(tensor, state[name])
        if problem:
            raise CheckpointError(f"{checkpoint.model} does not hold this run's adapter ({name} {problem})")
    model.load_state_dict(weights, strict=False)
