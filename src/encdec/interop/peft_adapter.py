"""An encdec model's LoRA adapters written as a peft adapter directory, in its Hugging Face family's module names.

    out/adapter_config.json         peft's LoraConfig: r, lora_alpha, lora_dropout, the adapted modules
                                    (task_type SEQ_2_SEQ_LM, base_model_name_or_path: the base)
    out/adapter_model.safetensors   base_model.model.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight (T5),
                                    base_model.model.model.encoder.layers.0.self_attn.q_proj.lora_A.weight (BART), ...

so that `PeftModel.from_pretrained(AutoModelForSeq2SeqLM.from_pretrained(base), out)` computes the logits
encdec does, `base` being the Hugging Face directory the run adapted (or `encdec export` of the base run).
Every encoder-decoder family of interop.families is written: each linear layer of ours is one of Hugging Face's,
name for name (the family's `module_names`, from its weight names), so peft's targets are those layers. A model Marian or Pegasus holds with its dimensions reordered (interleaved
sinusoids) has its adapters reordered alike (interop.model_dim). The same names let `lora.target_modules` name layers as peft
does for the family (q_proj, fc1, ...): `hf_module_names`.
"""

from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from encdec.errors import ConfigError
from encdec.interop.families import FAMILIES, family_for
from encdec.interop.model_dim import halves_order, model_dim
from encdec.interop.to_hf import check_export_out, hf_layout
from encdec.models.lora import ADAPTER, base_name, lora_layers
from encdec.safe_paths import atomic_path, output_dir, staged_files

FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md")  # what peft's save_pretrained writes


def hf_module_names(model: nn.Module) -> dict[str, str]:
    """Each linear layer's name -> its module's name in the Hugging Face model `model` exports as (T5's
    encoder.block.0.layer.0.SelfAttention.q, BART's model.encoder.layers.0.self_attn.q_proj, ...); empty for a
    model no family writes. Layers without a counterpart are left out."""
    cfg = getattr(model, "config", None)
    family = family_for(cfg) if getattr(cfg, "family", None) in ("encoder_decoder", "whisper") else None
    names = family.module_names(cfg) if family is not None else None
    if names is None:
        return {}
    found = {}
    for name, module in model.named_modules():
        if type(module) is nn.Linear:
            try:
                found[name] = names(base_name(name) + ".weight").removesuffix(".weight")
            except ConfigError:  # a layer the family has no name for: peft's names do not reach it
                continue
    return found


def save_peft_adapter(model: nn.Module, out: Path, base: str, force: bool = False) -> list[str]:
    """Write `model`'s adapters into `out` as a peft LoRA adapter of the Hugging Face model at `base`; returns the
    adapted modules' Hugging Face names. Nothing is written when a check fails."""
    from peft import LoraConfig

    layout = hf_layout(model.config)
    names = FAMILIES[layout].module_names(model.config)
    if names is None:
        raise ConfigError(f"a peft adapter is not written for a {layout} model yet; export the merged model")
    layers = lora_layers(model)
    if not layers:
        raise ConfigError("the model carries no LoRA adapter; export it without --adapter")
    adapted = {name + ".lora" for name in layers}
    other = sorted(
        n for n, p in model.named_parameters() if p.requires_grad and not any(n.startswith(a) for a in adapted)
    )
    if other:
        raise ConfigError(
            f"the run also trained {other[0]}, which a peft adapter cannot carry; export the merged model"
        )
    first = next(iter(layers.values()))
    r, alpha, dropout = first.r[ADAPTER], first.lora_alpha[ADAPTER], first.lora_dropout[ADAPTER]
    targets = {name: names(base_name(name) + ".weight").removesuffix(".weight") for name in layers}
    cfg = model.config  # Marian and Pegasus hold interleaved sinusoids' dimensions reordered (model_dim)
    interleaved = cfg.positions.kind == "sinusoidal" and cfg.positions.sinusoidal_layout == "interleaved"
    order = halves_order(cfg.d_model) if interleaved else None
    tensors = {}
    for name, layer in layers.items():
        for part in ("lora_A", "lora_B"):
            weight = getattr(layer, part)[ADAPTER].weight.detach().cpu()
            if order is not None:  # the export reorders the model dimension: A reads it, B writes it
                weight = reordered(base_name(name), part, weight, order)
            tensors[f"base_model.model.{targets[name]}.{part}.weight"] = weight.contiguous()
    check_adapter_out(out, force)
    output_dir(out, "--out")
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=getattr(dropout, "p", 0.0),
        target_modules=sorted(targets.values()),
        task_type="SEQ_2_SEQ_LM",
        base_model_name_or_path=base,
    )
    with staged_files(out) as stage:  # each file renamed into place: a link there is replaced
        config.save_pretrained(str(stage))
    with atomic_path(out / "adapter_model.safetensors") as tmp:
        save_file(tensors, tmp, metadata={"format": "pt"})
    return sorted(targets.values())


def reordered(name: str, part: str, weight: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """An adapter matrix of layer `name` with the model dimension reordered as an export reorders the layer's
    weight: lora_A (r, in) where the layer reads the residual stream, lora_B (out, r) where it writes it."""
    dim = model_dim(name + ".weight")
    if (part, dim) == ("lora_A", 1) or (part, dim) == ("lora_B", 0):
        return weight.index_select(dim, order)
    return weight


def check_adapter_out(out: Path, force: bool) -> None:
    """Refuse an unsafe output, a file, or a directory holding anything without `force` (or, with it, anything
    an adapter export does not write): export's check with the adapter's files."""
    check_export_out(out, force, lambda path: path.name in FILES, "adapter export")
