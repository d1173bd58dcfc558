"""An encdec model's LoRA adapters written as a peft adapter directory, in Hugging Face T5's module names.

    out/adapter_config.json         peft's LoraConfig: r, lora_alpha, lora_dropout, the adapted modules
                                    (task_type SEQ_2_SEQ_LM, base_model_name_or_path: the base)
    out/adapter_model.safetensors   base_model.model.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight, ...

so that `PeftModel.from_pretrained(AutoModelForSeq2SeqLM.from_pretrained(base), out)` computes the logits
encdec does, `base` being the T5 directory the run adapted (or `encdec export` of the base run). Only
the T5 layouts (T5, mT5, UMT5, SwitchTransformers) are written: their projections are Hugging Face's own
matrices, name for name (hf_t5.NAME_MAP, hf_switch.SWITCH_NAME_MAP).
"""

from pathlib import Path

from safetensors.torch import save_file
from torch import nn

from encdec.errors import ConfigError
from encdec.interop import hf_switch, hf_t5
from encdec.interop.to_hf import check_export_out, hf_layout
from encdec.models.lora import ADAPTER, lora_layers
from encdec.safe_paths import atomic_path, output_dir, staged_files

FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md")  # what peft's save_pretrained writes
# the layouts whose linear layers are Hugging Face's own, each with its names: ours -> Hugging Face's
HF_NAMES = {"t5": hf_t5.hf_name, "mt5": hf_t5.hf_name, "umt5": hf_t5.hf_name, "switch_transformers": hf_switch.hf_name}


def save_peft_adapter(model: nn.Module, out: Path, base: str, force: bool = False) -> list[str]:
    """Write `model`'s adapters into `out` as a peft LoRA adapter of the Hugging Face T5 at `base`; returns the
    adapted modules' Hugging Face names. Nothing is written when a check fails."""
    from peft import LoraConfig

    layout = hf_layout(model.config)
    if layout not in HF_NAMES:
        raise ConfigError(
            f"a peft adapter is written for T5, mT5, UMT5 and Switch models, not a {layout} one; export the merged model"
        )
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
    targets = {name: HF_NAMES[layout](name + ".weight").removesuffix(".weight") for name in layers}
    tensors = {}
    for name, layer in layers.items():
        for part in ("lora_A", "lora_B"):
            weight = getattr(layer, part)[ADAPTER].weight
            tensors[f"base_model.model.{targets[name]}.{part}.weight"] = weight.detach().cpu().contiguous()
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


def check_adapter_out(out: Path, force: bool) -> None:
    """Refuse an unsafe output, a file, or a directory holding anything without `force` (or, with it, anything
    an adapter export does not write): export's check with the adapter's files."""
    check_export_out(out, force, lambda path: path.name in FILES, "adapter export")
