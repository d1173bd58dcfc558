"""A decoder-only model adapted into an encoder-decoder (T5Gemma, Zhang et al. 2025, arXiv 2504.06225): both
stacks start from decoder-only models' blocks, the cross-attention from self-attention, and training goes on
with an encoder-decoder objective (UL2, PrefixLM).

    training:
      init_from: runs/decoder-only        # a decoder_only run, or a Hugging Face Gemma / Llama / Qwen directory
      init_decoder_from: runs/small       # unbalanced: the decoder from another, smaller decoder-only model
      cross_attention_warmup: 100         # steps in which only the weights no source had train
    model:
      family: encoder_decoder              # asked for: without it init_from fine-tunes the decoder-only model

Balanced (one source): the encoder-decoder takes the source's every setting (widths, heads, norms, RoPE,
windows, caps; its token table for each stack's own, and its head) with as many encoder as decoder layers as
the source has. The encoder attends both ways, the decoder causally to itself and, through cross-attention
without RoPE (T5Gemma's), to the encoder. Every weight comes from one of the source's: a stack's block i from
its block i, `cross_attn` from `self_attn`, each stack's final norm from its final norm.

Unbalanced (T5Gemma's 9B-2B): the encoder is init_from's model, of its depth and widths (ModelConfig's
model.encoder), and the decoder, token table and head are init_decoder_from's. Both sources must agree on all but
their widths and depths (one tokenizer). The decoder's cross-attention reads the other model's states, so, as
the paper does, it is not copied: the whole sublayer (its projections and norms) keeps its fresh initialisation,
and the paper trains it alone first: `training.cross_attention_warmup` steps leave every copied weight's gradient
out (the optimizer neither moves nor decays them) while the fresh ones warm up.

The source may teach its adaptation too (training.distill.teacher: the same model; training/distill.py reads each
PrefixLM row as one stream for it).

`adapted_weights` says which weight came from which (`copied`) and which are fresh; the run writes both
(adaptation.json) and logs them.
"""

import re
from typing import Any

import torch

from encdec.errors import ConfigError
from encdec.models.model_config import ENCODER_WIDTHS
from encdec.runs.model_section import PROVISIONAL_TOKENS, build_model_config

# the source's settings an encoder-decoder cannot take, each with why (one sentence when set)
NOT_ADAPTED = {
    "attention.bias": "biases on the attention projections alone (Qwen2's) are the decoder-only family's",
}
DECODER_ONLY_KEYS = ("attention.bias",)  # the fields an encoder-decoder section must not hold (a spec's)
# what the two sources of an unbalanced adaptation may differ in: widths and depth (the others name one model's
# settings, and its tokenizer), and what each run happened to train with
MAY_DIFFER = {*ENCODER_WIDTHS, "n_encoder_layers", "dropout", "init"}
ADAPTATION_FILE = "adaptation.json"
ENCODER_SOURCE, DECODER_SOURCE = "encoder", "decoder"  # which source a weight came from, in `copied`
CROSS_ATTENTION = re.compile(r"\.cross_attn(_norm|_post_norm)?\.")  # the decoder's cross-attention sublayer


def wants_adaptation(source_section: dict[str, Any], asked: dict[str, Any]) -> bool:
    """Whether a run's model section `asked` adapts the init_from model of section `source_section`: a
    decoder-only source and an encoder-decoder asked for by name."""
    return source_section.get("family") == "decoder_only" and asked.get("family") == "encoder_decoder"


def head_dim(section: dict[str, Any]) -> int:
    return section.get("d_head") or section["d_model"] // section["n_heads"]


def resolved(section: dict[str, Any]) -> dict[str, Any]:
    """A decoder-only model section with every setting written out: its preset's and its family's defaults
    (scale_attention, output.scale, init) are the decoder-only family's, which an encoder-decoder section
    would otherwise resolve to its own (T5's unscaled attention and scaled output). Token ids stay as given."""
    values = build_model_config(section, **PROVISIONAL_TOKENS).to_dict()
    values = {key: value for key, value in values.items() if key not in PROVISIONAL_TOKENS or key in section}
    if "research" not in section:
        values.pop("research", None)
    return values


def dotted(section: dict[str, Any]) -> dict[str, Any]:
    """A section's settings by their dotted names, a spec's each on its own ("attention.sliding_window")."""
    flat = {}
    for key, value in section.items():
        is_spec = isinstance(value, dict) and key != "encoder"  # the encoder's widths may differ, as one setting
        flat |= {f"{key}.{name}": inner for name, inner in value.items()} if is_spec else {key: value}
    return flat


def adapted_section(source: dict[str, Any], decoder_source: dict[str, Any] | None = None) -> dict[str, Any]:
    """The encoder-decoder model section of a decoder-only `source` section: its settings, its depth in each
    stack, cross-attention without RoPE. With `decoder_source` (unbalanced), the decoder's settings and depth
    are that one's and the encoder's widths (model.encoder) and depth `source`'s."""
    source = resolved(source)
    decoder_source = resolved(decoder_source) if decoder_source is not None else None
    for section in (source, decoder_source or {}):
        for key, why in NOT_ADAPTED.items():
            spec, name = key.split(".")
            value = section.get(spec, {}).get(name, "none")
            if value not in ("none", None, False):
                raise ConfigError(f"training.init_from's model has {key} {value!r}, which cannot be adapted: {why}")
    decoder = decoder_source or source
    if decoder_source is not None:
        ours, theirs = dotted(source), dotted(decoder_source)
        differ = sorted(
            key for key in set(ours) | set(theirs) if key not in MAY_DIFFER and ours.get(key) != theirs.get(key)
        )
        if differ:
            raise ConfigError(
                f"training.init_from's and training.init_decoder_from's models differ in {differ[0]} "
                f"({ours.get(differ[0])!r} and {theirs.get(differ[0])!r}); an unbalanced adaptation "
                "joins two models of one family and tokenizer that differ only in widths and depth"
            )
    section = dict(decoder)
    for key in DECODER_ONLY_KEYS:
        spec, name = key.split(".")
        section[spec] = {k: v for k, v in section.get(spec, {}).items() if k != name}
    section.update(family="encoder_decoder", n_decoder_layers=decoder["n_encoder_layers"])
    section["cross_attention"] = {**section.get("cross_attention", {}), "rope": "none"}
    section["n_encoder_layers"] = source["n_encoder_layers"]
    # a token table each stack, both the sources' at first (T5Gemma's)
    section["embeddings"] = {**section.get("embeddings", {}), "shared": False}
    if decoder_source is not None:
        own = {**{key: source.get(key) for key in ENCODER_WIDTHS}, "d_head": head_dim(source)}
        mine = {**{key: decoder.get(key) for key in ENCODER_WIDTHS}, "d_head": head_dim(decoder)}
        section["encoder"] = {key: value for key, value in own.items() if value != mine[key]}
    return section


def source_of(name: str) -> tuple[str, str]:
    """(the source, the decoder-only weight) an encoder-decoder weight `name` starts from: the encoder's weights
    from the encoder's source, every other (the decoder's, the token table, the head) from the decoder's; its
    stack's prefix dropped, cross-attention read from self-attention."""
    which = ENCODER_SOURCE if name.startswith("encoder.") else DECODER_SOURCE
    name = re.sub(r"^(encoder|decoder)\.", "", name)
    return which, re.sub(r"\.cross_attn(_norm|_post_norm)?\.", lambda m: f".self_attn{m.group(1) or ''}.", name)


def source_name(name: str) -> str:
    """The decoder-only weight an encoder-decoder weight `name` starts from (either source's name)."""
    return source_of(name)[1]


def adapted_weights(
    target: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    decoder_weights: dict[str, torch.Tensor] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, str], list[str]]:
    """The encoder-decoder's weights from a decoder-only model's `weights` (and, unbalanced, the decoder's from
    `decoder_weights`), each a copy: (weights, which source weight each copied one came from, the fresh ones).

    `target` is the new model's state dict. In an unbalanced adaptation the cross-attention sublayer keeps the
    target's own (fresh) values: it reads another model's states than the one its self-attention was trained on.
    A weight without a source of its shape is one sentence (`matched`)."""
    copied, fresh = matched(target, weights, decoder_weights)
    sources = {ENCODER_SOURCE: weights, DECODER_SOURCE: weights if decoder_weights is None else decoder_weights}
    adapted, kept = {}, set(fresh)
    for name, value in target.items():
        which, source = source_of(name)
        adapted[name] = value.clone() if name in kept else sources[which][source].clone()
    return adapted, copied, fresh


def matched(
    target: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    decoder_weights: dict[str, torch.Tensor] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """(which source weight each of the encoder-decoder's weights `target` starts from, the fresh ones), as
    `adapted_weights` copies them; a weight without a source of its shape is one sentence. `target` may be a
    model's on the meta device: only its names and shapes are read."""
    sources = {ENCODER_SOURCE: weights, DECODER_SOURCE: weights if decoder_weights is None else decoder_weights}
    copied, fresh = {}, []
    for name, value in target.items():
        if decoder_weights is not None and CROSS_ATTENTION.search(name):
            fresh.append(name)
            continue
        which, source = source_of(name)
        found = sources[which].get(source)
        if found is None:
            raise ConfigError(
                f"the adapted encoder-decoder's {name} has no counterpart in the decoder-only model ({source}); "
                "adapt a model whose settings the encoder-decoder shares"
            )
        if found.shape != value.shape:
            raise ConfigError(
                f"the adapted encoder-decoder's {name} is {tuple(value.shape)} but the decoder-only model's {source} "
                f"is {tuple(found.shape)}"
            )
        copied[name] = source if decoder_weights is None else f"{which}:{source}"
    return copied, fresh


def summary(record: dict[str, Any]) -> str:
    """One line of what came from where, by kind of weight, from an adaptation record (`record`)."""
    copied, fresh = record["copied"], record.get("fresh", [])
    blocks = {m.group(1) for name in copied if (m := re.match(r"(encoder|decoder)\.blocks\.", name))}
    cross = sum(".cross_attn" in name for name in copied)
    sources = "the decoder-only model" if "decoder_source" not in record else "the two decoder-only models"
    line = (
        f"adapted {sources} into an encoder-decoder: {len(copied)} weights copied, the "
        f"{' and '.join(sorted(blocks))} blocks from their blocks"
    )
    if cross:
        line += f", {cross} cross-attention weights from self-attention"
    if fresh:
        line += f", {len(fresh)} cross-attention weights initialised afresh"
    return f"{line} (written to {ADAPTATION_FILE})"


def warmup_frozen(record: dict[str, Any] | None, warmup: int) -> list[str]:
    """The weights training.cross_attention_warmup holds still (every copied one) given the run's adaptation
    record; one sentence where there is nothing to warm up."""
    if not warmup:
        return []
    if record is None or not record.get("fresh"):
        raise ConfigError(
            "training.cross_attention_warmup trains only the weights an adaptation did not copy, and this run has "
            "none: it needs an unbalanced adaptation (training.init_decoder_from)"
        )
    return sorted(record["copied"])
