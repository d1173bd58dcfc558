"""Attention maps as heat maps in a PNG: `plot_attention(maps, path, ...)`.

One panel per layer with its heads averaged (heads="mean"), or one panel per head of one layer
(heads="grid"); source tokens along x (and a transient-global encoder's block keys after them), the tokens the queries belong to along y (the target's for
cross-attention, the source's again for the encoder's self-attention). Each panel's colours run from 0 to
its own largest probability, which its colour bar gives. Drawn with matplotlib's Agg backend (no display).
"""

import math
from pathlib import Path
from typing import Literal

import torch

from encdec.errors import ConfigError
from encdec.inspection.maps import AttentionMaps
from encdec.safe_paths import atomic_path

MAX_LABELS = 80  # tokens named along an axis; beyond this every k-th is
PANEL_INCHES = (3.0, 10.0)  # a panel's side, from a few tokens to many
DPI = 100


def plot_attention(
    maps: AttentionMaps,
    path: str | Path,
    *,
    layer: int | None = None,
    heads: Literal["mean", "grid"] = "mean",
    encoder: bool = False,
) -> Path:
    """Draw the cross-attention (or with `encoder` the encoder's self-attention) of `maps` into a PNG at
    `path`: every layer (or only `layer`, counted from 0) with heads averaged, or with heads="grid" each head
    of `layer` (default: the last)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probs = maps.encoder if encoder else maps.cross  # (L, H, Q, S)
    panels = select_panels(probs, layer, heads, "encoder" if encoder else "decoder")
    rows_tokens = maps.source_tokens if encoder else maps.target_tokens
    Q, S = probs.shape[-2:]
    cols = min(len(panels), 4)
    rows = math.ceil(len(panels) / cols)
    width, height = panel_inches(S), panel_inches(Q)
    with plt.rc_context({"text.parse_math": False, "font.size": 8}):  # a "$" in a token is text, not TeX
        fig, axes = plt.subplots(rows, cols, figsize=(cols * (width + 1.2), rows * (height + 1.0)), squeeze=False)
        try:
            for ax, (title, values) in zip(axes.flat, panels, strict=False):
                image = ax.imshow(values.numpy(), cmap="viridis", vmin=0.0, aspect="auto", interpolation="nearest")
                fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
                ax.set_title(title)
                label_axis(ax.set_xticks, ax.set_xticklabels, key_labels(maps.source_tokens, S), rotation=90)
                label_axis(ax.set_yticks, ax.set_yticklabels, rows_tokens)
                ax.set_xlabel("source token (key)")
                ax.set_ylabel(("source" if encoder else "target") + " token (query)")
            for ax in axes.flat[len(panels) :]:
                ax.axis("off")
            kind = "encoder self-attention" if encoder else "cross-attention"
            written = "" if encoder else (" (its greedy output)" if maps.generated else " (a given target)")
            fig.suptitle(f"{maps.model}: {kind}{written}")
            fig.tight_layout()
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=DPI, format="png")
        finally:
            plt.close(fig)
    return Path(path)


def key_labels(source_tokens: list[str], keys: int) -> list[str]:
    """The keys' labels: the source tokens, then a transient-global encoder's keys of each block (LongT5's,
    after the tokens) as [block 0], [block 1], ..."""
    return [*source_tokens, *(f"[block {i}]" for i in range(keys - len(source_tokens)))]


def select_panels(probs: torch.Tensor, layer: int | None, heads: str, side: str) -> list[tuple[str, torch.Tensor]]:
    """(title, (Q, S) map) of each panel; an unknown layer or heads mode is one sentence (ConfigError)."""
    L, H = probs.shape[:2]
    if layer is not None and not 0 <= layer < L:
        raise ConfigError(f"layer {layer} does not exist: the {side} has {L} layers, 0 to {L - 1}")
    if heads == "mean":
        layers = range(L) if layer is None else [layer]
        return [(f"{side} layer {i}, mean of {H} heads", probs[i].mean(0)) for i in layers]
    if heads == "grid":
        chosen = L - 1 if layer is None else layer
        return [(f"{side} layer {chosen}, head {h}", probs[chosen, h]) for h in range(H)]
    raise ConfigError(f"heads must be mean or grid, got {heads!r}")


def panel_inches(tokens: int) -> float:
    """A panel's side for `tokens` rows or columns: a fifth of an inch each, within PANEL_INCHES."""
    low, high = PANEL_INCHES
    return min(max(0.2 * tokens + 1.0, low), high)


def label_axis(set_ticks, set_labels, tokens: list[str], rotation: int = 0) -> None:
    """Name the axis's tokens (every k-th where there are more than MAX_LABELS), whitespace made visible."""
    step = math.ceil(len(tokens) / MAX_LABELS)
    positions = list(range(0, len(tokens), step))
    set_ticks(positions)
    set_labels([visible(tokens[i]) for i in positions], rotation=rotation)


def visible(token: str) -> str:
    """A token as a tick label: line breaks and tabs escaped, a leading or trailing space shown as "␣"."""
    text = token.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if text != text.strip(" "):
        text = text.replace(" ", "␣")
    return text
