"""A decoder-only model adapted into an encoder-decoder (T5Gemma, Zhang et al. 2025, arXiv 2504.06225): both
stacks start from the decoder-only model's blocks, the cross-attention from its self-attention, and training
goes on with an encoder-decoder objective (UL2, PrefixLM).

    training:
      init_from: runs/decoder-only        # a decoder_only run, or a Hugging Face Gemma / Llama / Qwen directory
    model:
      family: encoder_decoder              # asked for: without it init_from fine-tunes the decoder-only model

The encoder-decoder takes the source's every setting (widths, heads, norms, RoPE, windows, caps; its token
table for each stack's own, and its head) with as many encoder as decoder layers as the source has; the encoder attends both ways, the
decoder causally to itself and, through cross-attention without RoPE (T5Gemma's), to the encoder. Every weight
comes from one of the source's: a stack's block i from its block i, `cross_attn` from `self_attn`, each stack's
final norm from its final norm. `copied` says which from which; the run writes it (adaptation.json) and logs it.

Not built yet: the unbalanced variant (an encoder from a large source, a decoder from a small one), which needs
cross-attention from a wider encoder than the decoder, a shape encdec's ModelConfig does not express.
"""

import re
from typing import Any

import torch

from encdec.errors import ConfigError

# the source's settings an encoder-decoder cannot take, each with why (one sentence when set)
NOT_ADAPTED = {
    "attention_bias": "biases on the attention projections alone (Qwen2's) are the decoder-only family's",
}
DECODER_ONLY_KEYS = ("attention_bias",)  # the fields an encoder-decoder section must not hold
ADAPTATION_FILE = "adaptation.json"


def wants_adaptation(source_section: dict[str, Any], asked: dict[str, Any]) -> bool:
    """Whether a run's model section `asked` adapts the init_from model of section `source_section`: a
    decoder-only source and an encoder-decoder asked for by name."""
    return source_section.get("family") == "decoder_only" and asked.get("family") == "encoder_decoder"


def adapted_section(source: dict[str, Any]) -> dict[str, Any]:
    """The encoder-decoder model section of a decoder-only `source` section: its settings, its depth in each
    stack, cross-attention without RoPE."""
    for key, why in NOT_ADAPTED.items():
        if source.get(key, "none") not in ("none", None, False):
            raise ConfigError(f"training.init_from's model has {key} {source[key]!r}, which cannot be adapted: {why}")
    section = {key: value for key, value in source.items() if key not in DECODER_ONLY_KEYS}
    section.update(family="encoder_decoder", n_decoder_layers=source["n_encoder_layers"], rope_cross="none")
    section["shared_embeddings"] = False  # a token table each stack, both the source's at first (T5Gemma's)
    return section


def source_name(name: str) -> str:
    """The decoder-only weight an encoder-decoder weight `name` starts from: its stack's prefix dropped,
    cross-attention read from self-attention."""
    name = re.sub(r"^(encoder|decoder)\.", "", name)
    return re.sub(r"\.cross_attn(_norm|_post_norm)?\.", lambda m: f".self_attn{m.group(1) or ''}.", name)


def adapted_weights(
    target_names: list[str], weights: dict[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The encoder-decoder's weights (its state dict's `target_names`) from a decoder-only model's `weights`,
    each a copy, and which source weight each came from; a target with no source is one sentence."""
    copied = {name: source_name(name) for name in target_names}
    missing = [name for name, source in copied.items() if source not in weights]
    if missing:
        raise ConfigError(
            f"the adapted encoder-decoder's {missing[0]} has no counterpart in the decoder-only model "
            f"({copied[missing[0]]}); adapt a model whose settings the encoder-decoder shares"
        )
    return {name: weights[source].clone() for name, source in copied.items()}, copied


def summary(copied: dict[str, str]) -> str:
    """One line of what came from where, by kind of weight."""
    blocks = {m.group(1) for name in copied if (m := re.match(r"(encoder|decoder)\.blocks\.", name))}
    cross = sum(".cross_attn" in name for name in copied)
    return (
        f"adapted the decoder-only model into an encoder-decoder: {len(copied)} weights copied, the "
        f"{' and '.join(sorted(blocks))} blocks from its blocks, {cross} cross-attention weights from its "
        f"self-attention (written to {ADAPTATION_FILE})"
    )
