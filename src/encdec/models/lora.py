"""LoRA (Hu et al. 2021) on any model's linear layers, through peft's own layer, and training only some parameters.

    add_lora(model, r=8, lora_alpha=16, lora_dropout=0.05, target_modules=["q", "v"])
    train_only(model, ["decoder.blocks.*.cross_attn.*"])   # every other base parameter frozen
    merge_lora(model)                                      # W + (alpha / r) B A folded in, plain nn.Linear again

Layers are picked by module name as peft picks them: a list entry names a module exactly or as its
last dotted parts, a single string is a regular expression the whole name must match. encdec's
names (`python -c "...; print([n for n, _ in model.named_modules()])"` lists them):

    encoder.blocks.{i}.self_attn.{q,k,v,o}    decoder.blocks.{i}.self_attn.{q,k,v,o}
    encoder.blocks.{i}.ffn.{wi,wo}            decoder.blocks.{i}.cross_attn.{q,k,v,o}
    (gated: ffn.wi_0, ffn.wi_1)               decoder.blocks.{i}.ffn.{wi,wo}

so ["q", "v"] is every attention's queries and values, ["cross_attn.q", "cross_attn.v"] the
cross-attention's alone, and r"encoder\\..*\\.(q|v)" the encoder's. `aliases` gives each layer a second
name a pattern may pick it by: its module's name in the Hugging Face model it exports as
(interop.peft_adapter.hf_module_names), so that a run names layers as peft does for that family
(BART's ["q_proj", "v_proj", "fc1"], T5Gemma's ["q_proj", "gate_proj"], T5's ["SelfAttention.q"]).
A regular expression is matched by encdec.models.name_patterns, in steps bounded by its length times
the name's: Python's syntax less backreferences, lookarounds and flags, at most 256 characters. Each
pattern must name a layer and only linear layers (one sentence otherwise). peft's layer keeps the
original as `base_layer`, so a weight `...q.weight` is then `...q.base_layer.weight` and the adapter
`...q.lora_A.default.weight`.
peft is imported only where LoRA is used.
"""

import fnmatch

import torch
from torch import nn

from encdec.errors import ConfigError, listed
from encdec.models.name_patterns import NamePattern, NamePatterns
from encdec.schema import short

ADAPTER = "default"  # peft's name for the one adapter a model carries
WRAPPED = "_checkpoint_wrapped_module."  # activation checkpointing's wrapper, absent from state dict names


def lora_targets(model: nn.Module, target_modules: list[str] | str, aliases: dict[str, str] | None = None) -> list[str]:
    """The names of the linear layers `target_modules` picks (peft's rules) by their own names or their
    `aliases` (layer name -> another name); ConfigError for a pattern that picks nothing or picks a module
    that is not a linear layer."""
    aliases = aliases or {}
    names = [name for name, _ in model.named_modules() if name]
    patterns = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    if not patterns:
        raise ConfigError("lora.target_modules is empty; name the layers to adapt, e.g. [q, v]")
    if not isinstance(target_modules, str):
        NamePatterns().check(patterns, "lora.target_modules", list)
    picked = []
    for pattern in patterns:
        if isinstance(target_modules, str):
            matcher = NamePattern(pattern, "lora.target_modules")
            hits = [n for n in names if matcher.fullmatch(n) or (n in aliases and matcher.fullmatch(aliases[n]))]
        else:
            hits = [n for n in names if any(picks(pattern, a) for a in (n, aliases.get(n)) if a is not None)]
        if not hits:
            family = getattr(getattr(model, "config", None), "family", type(model).__name__)
            other = f", or in Hugging Face's names {listed(suffixes(aliases.values()), budget=60)}" if aliases else ""
            raise ConfigError(
                f"lora.target_modules {short(pattern)} names no layer of the {family} model "
                f"(its linear layers end in {listed(linear_suffixes(model), budget=100) or 'nothing: it has none'}{other})"
            )
        other = next((n for n in hits if type(model.get_submodule(n)) is not nn.Linear), None)
        if other is not None:
            kind = type(model.get_submodule(other)).__name__
            raise ConfigError(f"lora.target_modules {pattern!r} picks {other}, a {kind}; LoRA adapts linear layers")
        if "lm_head" in hits:  # the vocabulary projection reads its weight itself (modules/vocab_projection.py)
            raise ConfigError(f"lora.target_modules {pattern!r} picks lm_head, which LoRA does not adapt here")
        picked += [n for n in hits if n not in picked]
    return picked


def picks(pattern: str, name: str) -> bool:
    """peft's rule for a list entry: the whole name, or its last dotted parts."""
    return name == pattern or name.endswith("." + pattern)


def linear_suffixes(model: nn.Module) -> list[str]:
    """The last two dotted parts of every linear layer's name (self_attn.q, ffn.wi, ...), each once."""
    found = [".".join(n.split(".")[-2:]) for n, m in model.named_modules() if type(m) is nn.Linear]
    return list(dict.fromkeys(found))


def suffixes(names) -> list[str]:
    """The last two dotted parts after a layer's number of each of `names` (self_attn.q_proj, fc1), each once."""
    found = []
    for name in names:
        parts = name.split(".")
        numbers = [i for i, part in enumerate(parts) if part.isdigit()]
        found.append(".".join(parts[numbers[-1] + 1 if numbers else 0 :][-2:]))
    return list(dict.fromkeys(found))


def add_lora(
    model: nn.Module,
    r: int,
    lora_alpha: float,
    lora_dropout: float,
    target_modules: list[str] | str,
    aliases: dict[str, str] | None = None,
) -> list[str]:
    """Replace the picked linear layers (by their names or `aliases`) by peft's LoRA layers (B zero, so the
    logits are unchanged) and freeze every other parameter. Returns the adapted layers' names."""
    from peft import LoraConfig, inject_adapter_in_model

    if r < 1:
        raise ConfigError(f"lora.r must be a positive integer, got {r}")
    targets = lora_targets(model, target_modules, aliases)
    config = LoraConfig(r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, target_modules=targets)
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    return targets


def lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Module name -> peft LoRA layer, for every adapted layer of `model`."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its layer with peft's merge and put the plain nn.Linear back in its place."""
    for name, layer in lora_layers(model).items():
        layer.merge(safe_merge=True)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, layer.get_base_layer())
    return model


def base_name(name: str) -> str:
    """A parameter's name as the model without adapters and wrappers calls it (`...q.base_layer.weight` -> `...q.weight`)."""
    return name.replace(WRAPPED, "").replace(".base_layer.", ".")


def train_only(model: nn.Module, patterns: list[str]) -> list[str]:
    """Freeze every parameter but those whose name matches one of the glob `patterns` (`*` crosses dots) and
    any LoRA adapter's; ConfigError for a pattern matching no parameter. Returns the names left to train."""
    NamePatterns().check(patterns, "training.train_only", list)  # bounded: fnmatch's own work grows with both
    names = [(base_name(n), p) for n, p in model.named_parameters(remove_duplicate=False)]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(n, pattern) for n, _ in names):
            raise ConfigError(
                f"training.train_only {pattern!r} matches no parameter (names look like {names[-1][0]})"
                if names
                else f"training.train_only {pattern!r} matches no parameter: the model has none"
            )
    keep = {id(p) for n, p in names if ".lora_" in n or any(fnmatch.fnmatchcase(n, pat) for pat in patterns)}
    for _, p in names:
        p.requires_grad_(id(p) in keep)
    return [n for n, p in model.named_parameters() if p.requires_grad]


def trainable_state(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of `state` (the model's state dict) that train: the adapters and what train_only kept."""
    trainable = {n.replace(WRAPPED, "") for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    return {name: tensor for name, tensor in state.items() if name in trainable}
