"""What every Hugging Face family folder (interop/<family>/) declares, and the pieces their config mappings share.

A family is the model_type of a config.json. Its folder gives one `Family` (or a few sharing a layout): how a
config.json becomes a ModelConfig and back, its `NameMap` of weight names (one table, read forwards to load
and to export, backwards to name a checkpoint's tensor as ours), the refusals of what its layout cannot hold,
its tokenizer files, and the transformers class an export loads as. interop.families lists the folders; the
generic code (from_hf, to_hf, peft_adapter) reads that list and names no family.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from encdec.errors import ConfigError
from encdec.interop.checkpoint_files import write_hf_directory
from encdec.models import ModelConfig
from encdec.safe_paths import write_atomic

IDS = {"pad_id": "pad_token_id", "eos_id": "eos_token_id", "decoder_start_id": "decoder_start_token_id"}
# what a {placeholder} of a NameMap template stands for, the same on both sides
PARTS = {
    "side": "encoder|decoder",
    "i": r"\d+",
    "e": r"\d+",
    "qkvo": "q|k|v|o",
    "qkv": "q|k|v",
    "qk": "q|k",
    "wi": "wi|wi_0|wi_1|wo",
    "wio": "wi|wo",
    "wb": "weight|bias",
    "attn": "self_attn|cross_attn",
}


def template_pattern(template: str) -> re.Pattern:
    """A NameMap template (`{side}.blocks.{i}.ffn.{wi}.weight`) as a regular expression of named groups."""
    pieces = re.split(r"\{(\w+)\}", template)
    return re.compile(
        "".join(re.escape(piece) if n % 2 == 0 else f"(?P<{piece}>{PARTS[piece]})" for n, piece in enumerate(pieces))
    )


def renamed(table: tuple, name: str) -> str | None:
    """`name` by the first (pattern, template) of `table` it matches, its placeholders carried over; None if none."""
    for pattern, template in table:
        match = pattern.fullmatch(name)
        if match:
            return template.format(**match.groupdict())
    return None


def shared_table(theirs: str) -> tuple[tuple[str, str], ...]:
    """The token table both stacks and the model share, registered under three names of ours, as `theirs`."""
    return tuple((ours, theirs) for ours in ("embed.weight", "encoder.embed.weight", "decoder.embed.weight"))


@dataclass(frozen=True)
class NameMap:
    """One reversible table of parameter names: (our template, the checkpoint's template) pairs whose
    {placeholders} (PARTS) carry over. `hf` reads it forwards (loading looks each of our tensors up by it, an
    export writes each under it), `ours` backwards; several of ours may share a checkpoint name (one token table
    registered in three places), and `ours` gives the first."""

    family: str  # as a refusal names it
    pairs: tuple[tuple[str, str], ...]
    forwards: tuple = field(init=False, repr=False, compare=False)  # (our pattern, their template) pairs
    backwards: tuple = field(init=False, repr=False, compare=False)  # (their pattern, our template) pairs

    def __post_init__(self):
        object.__setattr__(self, "forwards", tuple((template_pattern(a), b) for a, b in self.pairs))
        object.__setattr__(self, "backwards", tuple((template_pattern(b), a) for a, b in self.pairs))

    def hf(self, our_name: str) -> str:
        """Our parameter name -> its name in the family's checkpoints (ConfigError: it has none)."""
        found = renamed(self.forwards, our_name)
        if found is None:
            raise ConfigError(f"parameter {our_name} has no Hugging Face {self.family} counterpart")
        return found

    def ours(self, hf_name: str) -> str:
        """A checkpoint's tensor name -> ours (ConfigError: encdec has no such parameter)."""
        found = renamed(self.backwards, hf_name)
        if found is None:
            raise ConfigError(f"{self.family}'s tensor {hf_name} has no encdec counterpart")
        return found

    def weights(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """`model`'s tensors under the family's names, ready to write."""
        return {self.hf(name): t.detach().cpu().contiguous() for name, t in model.state_dict().items()}

    def where(self, keep: Callable[[str, str], bool], family: str | None = None) -> "NameMap":
        """The pairs `keep(ours, theirs)` keeps, as a map of `family`'s."""
        return NameMap(family or self.family, tuple(pair for pair in self.pairs if keep(*pair)))

    def plus(self, family: str, *pairs: tuple[str, str]) -> "NameMap":
        """`pairs` (read first) and this map's, as a map of `family`'s."""
        return NameMap(family, (*pairs, *self.pairs))


def config_read_alone(config_from_hf: Callable[..., ModelConfig]) -> Callable[[dict], ModelConfig]:
    """A family's config.json -> ModelConfig without its weights (encdec size): the head untied where
    tie_word_embeddings says false (a loader reads it from the weights themselves)."""
    return lambda hf: config_from_hf(hf, untied_head=hf.get("tie_word_embeddings", True) is False)


@dataclass(frozen=True)
class Family:
    model_type: str  # config.json's model_type
    hf_class: str  # the transformers class an export loads as
    load: Callable[[Path, dict], nn.Module]  # (directory, its config.json) -> our model, weights filled
    check: Callable[[ModelConfig], None]  # ConfigError naming what keeps a config from this layout
    files: Callable[[nn.Module], tuple[dict[str, torch.Tensor], dict]]  # our model -> its weights, config keys
    writes: Callable[[ModelConfig], bool]  # whether a model of this layout (and model_family) exports as this family
    keys: dict[str, str]  # ModelConfig field -> the config.json key it is read from, where the names differ
    tokenizer_files: tuple[str, ...]  # the tokenizer files its checkpoints ship beside tokenizer.json
    config: Callable[[dict], ModelConfig] | None = None  # config.json -> our config, no weight read (encdec size)
    model_family: str = "encoder_decoder"  # the ModelConfig.family it is read into and written from
    names: Callable[[ModelConfig], NameMap] | None = None  # its weight names for a model of `cfg`
    module_name: Callable[[str], str] = str  # a checkpoint's tensor name -> the module's as transformers builds it
    encoder_widths: bool = False  # whether its layout holds an encoder of its own widths (ModelConfig.encoder_*)
    source_vocabulary: bool = False  # whether it holds an encoder's table of its own size (model.encoder.vocab_size)
    note: Callable[[ModelConfig], str | None] = lambda cfg: None  # a warning an export of `cfg` logs
    # where no family writes `cfg`: the refusal's opening if this family is the one counterpart of its kind
    only_counterpart: Callable[[ModelConfig], str | None] = lambda cfg: None
    # JSON files its directories hold beside config.json, by name (Whisper's preprocessor_config.json)
    extra_files: Callable[[ModelConfig], dict[str, dict]] = lambda cfg: {}
    # generation_config.json's keys of the family's own decoding that encdec's options do not hold (Whisper's
    # lang_to_id, ...): kept as read (the loaded model's hf_generation) and written back on export
    generation_keys: tuple[str, ...] = ()

    def save(self, model: nn.Module, path: Path) -> None:
        """Write `model` into `path` as this family's config.json and model.safetensors; a layout the family
        cannot express is refused first (ConfigError), nothing written."""
        self.check(model.config)
        weights, config = self.files(model)
        write_hf_directory(path, weights, {"architectures": [self.hf_class], "model_type": self.model_type, **config})
        for name, values in self.extra_files(model.config).items():
            write_atomic(path / name, json.dumps(values, indent=2) + "\n")

    def module_names(self, cfg: ModelConfig) -> Callable[[str], str] | None:
        """Our parameter name -> the name of its module's weight in the transformers model (peft's targets)."""
        if self.names is None:
            return None
        names = self.names(cfg)
        return lambda ours: self.module_name(names.hf(ours))


def layer_sizes(hf: dict, keys: dict[str, str]) -> dict:
    """The vocabulary, widths, heads and layer counts of a config.json, each read from the key `keys` names
    (the one refusals name it by; the field's own name otherwise); the decoder's layers default to the encoder's."""
    names = ("vocab_size", "d_model", "d_ff", "n_heads", "n_encoder_layers")
    sizes = {name: hf[keys.get(name, name)] for name in names}
    return sizes | {"n_decoder_layers": hf.get(keys["n_decoder_layers"]) or sizes["n_encoder_layers"]}


def hf_layer_sizes(cfg: ModelConfig, keys: dict[str, str]) -> dict:
    """layer_sizes the other way: `cfg`'s vocabulary, widths, heads and layer counts under the keys `keys` names."""
    sizes = {"vocab_size": cfg.vocab_size, "d_model": cfg.d_model, "d_ff": cfg.d_ff, "n_heads": cfg.n_heads}
    sizes |= {"n_encoder_layers": cfg.n_encoder_layers, "n_decoder_layers": cfg.decoder_layers}
    return {keys.get(name, name): value for name, value in sizes.items()}


def plain_heads_problems(cfg: ModelConfig) -> dict[str, bool]:
    """Whether self- and cross-attention have other than n_heads query and key/value heads, which no
    Hugging Face encoder-decoder layout encdec writes can express (no GQA, no wider cross-attention)."""
    return {
        "n_kv_heads must equal n_heads": (cfg.n_kv_heads or cfg.n_heads) != cfg.n_heads,
        "cross-attention heads must equal n_heads": (cfg.cross_attention.n_heads or cfg.n_heads) != cfg.n_heads
        or (cfg.cross_attention.n_kv_heads or cfg.n_kv_heads or cfg.n_heads) != cfg.n_heads,
    }


def id_keys(cfg: ModelConfig) -> dict:
    """The ids an encoder-decoder's config.json carries: pad, EOS and the decoder's start."""
    return {"pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id, "decoder_start_token_id": cfg.decoder_start_id}


def first_set(*values):
    return next(value for value in values if value is not None)


def first_eos(eos):
    """config.json's eos_token_id, its first where it lists several (generate stops at any; encdec at one)."""
    return (eos or [None])[0] if isinstance(eos, list) else eos
