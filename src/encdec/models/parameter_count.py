"""A model's parameters counted from its ModelConfig: what `encdec size` prints.

The count is the model's own: the family's class builds it from the config on torch's meta device (shapes
without storage, so any size costs no memory) and `count_parameters` counts it: a shared tensor once (a tied
head is the token table; the encoder and decoder share it), buffers (sinusoidal tables, RoPE's frequencies, a
fixed logits bias) not at all, and "without positions" without the learned absolute position tables and T5's
relative bias, as the seeds count. Nothing here describes an architecture: a new mechanism is counted as built.
The build skips the weight init (`Unfilled`) and the fixed tables' values (modules.positions.on_meta): a meta
tensor has no values, and torch's meta kernels for them import torch._dynamo, a second of an `encdec size`.

Building costs Python's work per module, about 60 us each, so thousands of experts or layers are counted from
smaller models of the same config (`counted`): a mixture of experts holds a router row and a feed-forward per
expert, so a count grows by the same with each expert more (from 2); a stack's layers repeat with the period
of the config's per-layer rules (`layer_period`), so a count grows by the same with each period of layers more.
tests/models/test_parameter_count.py holds both equal to the whole model's count.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from encdec.errors import ConfigError
from encdec.models.family_classes import FAMILY_CLASSES, count_parameters
from encdec.models.family_rules import check_family
from encdec.models.model_config import ModelConfig
from encdec.models.weights_memory import count, estimated_parameters
from encdec.schema import short

MOST_EXPERTS = 4  # beyond this, a count is made from models of 2 and 3 experts
MOST_LAYERS = 32  # beyond this a stack's layers, from models of fewer (by whole periods)
MOST_PARAMETERS = 2**60  # torch's sizes are 64-bit counts of bytes: a model past this is a typo, not a model


@dataclass(frozen=True)
class ParameterCount:
    total: int
    positions: int  # of `total`: learned absolute position tables and T5's relative bias

    @property
    def without_positions(self) -> int:
        return self.total - self.positions

    def stepped(self, after_one: "ParameterCount", steps: int) -> "ParameterCount":
        """This count plus `steps` times what one step more adds (`after_one` is the count one step on)."""
        return ParameterCount(
            self.total + steps * (after_one.total - self.total),
            self.positions + steps * (after_one.positions - self.positions),
        )


def count_parameters_of(cfg: ModelConfig) -> ParameterCount:
    """The parameters of the model `cfg` describes: of that model built on the meta device, or of smaller ones of
    the same config where it has more than MOST_EXPERTS experts or MOST_LAYERS layers in a stack. ConfigError
    (one sentence) where its family refuses the config, as building it would, or where it is past MOST_PARAMETERS."""
    check_family(cfg)  # what building it refuses, said before any smaller model is built
    estimate = estimated_parameters(cfg)  # from above
    if estimate > MOST_PARAMETERS:
        raise ConfigError(
            f"the model would have about {count(estimate)} parameters (d_model {count(cfg.d_model)}, vocabulary "
            f"{count(cfg.vocab_size)}), more than any tensor library counts: check the config's sizes"
        )
    return counted(cfg)


def counted(cfg: ModelConfig) -> ParameterCount:
    """`cfg`'s count from smaller models, along the first of its repeated parts (`repeated`) that has smaller
    models to count: at the least value from its first that is whole periods fewer, and one period above it;
    else of the model built."""
    for n, first, period, config_at in repeated(cfg):
        low = first + (n - first) % period
        if n > low + period:
            return counted(config_at(low)).stepped(counted(config_at(low + period)), (n - low) // period)
    return built_count(cfg)


def repeated(cfg: ModelConfig) -> list[tuple[int, int, int, Callable[[int], ModelConfig]]]:
    """(how many, the least value from which each period more adds the same, the period, `cfg` with another
    value) of each of `cfg`'s repeated parts past MOST_EXPERTS or MOST_LAYERS: the experts (a router row and a
    feed-forward each in every sparse layer, from 2), the decoder's layers where it sets them, the encoder's (with
    the decoder's too where it does not), at least the decoder's (the parallel family's decoder is in it)."""
    period, decoder, parts = layer_period(cfg), cfg.n_decoder_layers, []
    if cfg.experts.count > MOST_EXPERTS:
        parts.append((cfg.experts.count, 2, 1, partial(with_experts, cfg)))
    if decoder is not None and decoder > MOST_LAYERS:
        parts.append((decoder, period, period, lambda n: replace(cfg, n_decoder_layers=n)))
    if cfg.n_encoder_layers > MOST_LAYERS:
        first = max(period, decoder or 0)
        parts.append((cfg.n_encoder_layers, first, period, lambda n: replace(cfg, n_encoder_layers=n)))
    return parts


def layer_period(cfg: ModelConfig) -> int:
    """Layers after which a stack's layers repeat: the steps of its sparse feed-forwards (Experts.layer) and of its
    global layers among sliding ones (ModelConfig.sliding_layer)."""
    steps = [cfg.experts.step(decoder=False), cfg.experts.step(decoder=True)] if cfg.experts.count > 1 else []
    steps += [cfg.attention.global_every] if cfg.attention.sliding_window is not None else []
    return math.lcm(1, *steps)


def with_experts(cfg: ModelConfig, n: int) -> ModelConfig:
    """`cfg` with n experts, routed to as few of them as it routes to (top_k at most n)."""
    return replace(cfg, experts=replace(cfg.experts, count=n, top_k=min(cfg.experts.top_k, n)))


def built_count(cfg: ModelConfig) -> ParameterCount:
    """The count of the model `cfg`'s family builds, built on the meta device without its weight init."""
    model = meta_model(cfg)
    total = count_parameters(model)
    return ParameterCount(total, total - count_parameters(model, exclude_positions=True))


def meta_model(cfg: ModelConfig) -> nn.Module:
    """The model `cfg`'s family builds, on the meta device without its weight init: shapes without storage; one
    sentence (ConfigError) where a weight has more bytes than torch can count (a width of 2**52)."""
    try:
        with torch.device("meta"), Unfilled():
            return FAMILY_CLASSES[cfg.family](cfg)  # its constructor refuses what the family refuses
    except RuntimeError as error:
        if "overflow" not in str(error):
            raise
        raise ConfigError(
            f"the model has a weight too large to describe ({short(str(error))}); lower its widths"
        ) from None


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor in the state dict of the model `cfg` describes (what weights loaded into it
    must fit), from its meta build."""
    return {name: tuple(tensor.shape) for name, tensor in meta_model(cfg).state_dict().items()}


class Unfilled(TorchFunctionMode):
    """torch.nn.init's fills skipped: a meta tensor has no values (and torch's meta normal_ imports
    torch._dynamo on its first call, a second of an `encdec size`). Everything else runs as it would."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)
