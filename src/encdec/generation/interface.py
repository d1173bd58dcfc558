"""The per-step protocol every generating family implements, so the search code never changes.

    state = model.start(src_ids, src_mask, max_new_tokens, beams)   # once per batch
    logits = model.step(tgt_ids, state)                              # once per step
    state.reorder(index)                                             # beam search only

`start` does whatever must happen once: the canonical encoder-decoder runs its
encoder, allocates its self-attention caches and fills the cross-attention caches;
a decoder-only model would prefill its prompt (the source) instead. `step` takes
the newest target tokens of every row and returns their logits; a family whose
encoder advances with the decoder (the auto-regressive and parallel encoder-
decoders of SEEDS.md sections 3-4) runs one more encoder position inside `step`
and appends to growing cross-attention caches. `beams` tells `start` that the
search will hold N rows per example, laid out example-major (row b*N + n), so a
family may share per-example tensors between them rather than copying.

Everything a search makes lives on the model's device (`model_device`); `start`
and `step` receive their inputs there.

Shapes: B examples, N rows per example (beams or returned samples), S source
length, t new positions, V vocabulary.
"""

from dataclasses import dataclass
from itertools import chain
from typing import Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class SearchState(Protocol):
    """What a search needs of the state a family carries between steps (caches, encoder output, masks):
    its reorder. Every attention family's is encdec.modules.DecodeState; the RNN keeps a recurrent state."""

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (B*N,) in that order; beam search calls it after every step.

        Every index stays within its own example's N rows, so per-example state
        (a fixed encoder output, its cross-attention keys) need not move.
        """


@runtime_checkable
class Steppable(Protocol):
    """A model generation can drive: the canonical encoder-decoder, and any family that
    implements these two methods (decoder-only with the source as prompt, or the
    auto-regressive and parallel encoder-decoders whose encoder advances with the decoder)."""

    def start(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, max_new_tokens: int, beams: int = 1
    ) -> SearchState:
        """src_ids (B, S), src_mask (B, S) bool, True at real tokens -> a state for B*N rows."""

    def step(self, tgt_ids: torch.Tensor, state: SearchState) -> torch.Tensor:
        """tgt_ids (B*N, t), the next t target positions of every row -> logits (B*N, t, V)."""


@dataclass(frozen=True)
class Capabilities:
    """What a Steppable may offer beyond `start` and `step`, declared by its `capabilities` attribute (none
    where it declares nothing): what generation, the server and the attention maps read, never sniff."""

    steps_last_only: bool = False  # step(..., last_only=True): the vocabulary product on the last position only
    continuous_batching: bool = False  # its DecodeState's rows may join and leave a running batch (encdec.serving)
    pads_left: bool = False  # prompts of different lengths are padded on the left (a causal LM's)
    packs_sources: bool = False  # start(..., packed=True) encodes the sources end to end in packed rows
    attention_maps: bool = False  # attention_layers(): the encoder's and the cross-attention's modules
    reads_features: bool = False  # start takes float features (B, C, T) as src_ids, a speech encoder's log-mels
    speculates: bool = False  # begin() from an encoder output and a DecodeState cut back (generation.speculative)


NOTHING = Capabilities()


def capabilities_of(model) -> Capabilities:
    """`model.capabilities`, or no capability where it declares none (a Steppable need declare nothing)."""
    declared = getattr(model, "capabilities", NOTHING)
    return declared if isinstance(declared, Capabilities) else NOTHING


def prompt_logits(model: Steppable, prompt: torch.Tensor, state: SearchState) -> torch.Tensor:
    """prompt (R, P) -> the logits (R, V) of its last position, the first a search samples from.

    A model whose `step` takes `last_only` (its capabilities say `steps_last_only`) multiplies only that
    position by the vocabulary matrix; any other Steppable is stepped as the protocol says.
    """
    if prompt.shape[1] > 1 and capabilities_of(model).steps_last_only:
        return model.step(prompt, state, last_only=True)[:, -1]
    return model.step(prompt, state)[:, -1]


def model_device(model, default: torch.device | str = "cpu") -> torch.device:
    """Where `model` computes: its `device` attribute if it is a torch.device, else the device of its
    first parameter or buffer, else that of the module it wraps as `.model` (a cache-free reference,
    say); `default` for a Steppable with no tensors to tell."""
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    for candidate in (model, getattr(model, "model", None)):
        if isinstance(candidate, nn.Module):
            for tensor in chain(candidate.parameters(), candidate.buffers()):
                return tensor.device
    return torch.device(default)
