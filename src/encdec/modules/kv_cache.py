"""Key/value caches for incremental decoding: the static cache of a fixed memory, and a layer's pair.

Keys and values are stored per KV head (B, K, S, D), after RoPE, so a grouped-
query layer caches K heads, not H, and nothing is rotated twice. The caches that
grow as decoding goes (self-attention's) and the decode state's memory caches are
encdec.modules.layer_caches's, behind the protocol the decode state moves them by.

Shapes: B batch, K kv heads, S cached length, D head dim.
"""

from dataclasses import dataclass

import torch


class StaticKVCache:
    """A cache filled once: cross-attention keys and values of a fixed encoder output.

    Both are stored contiguous; the keys in one of two layouts, whichever lets a decoding
    step's few queries multiply them fastest (`Attention` does so on CPU, `attend_transposed`):
    as they come, (B, K, S, D), when each row of keys serves one query row (greedy decoding,
    sampling), and transposed, (B, K, D, S), when it serves several (the beams of one
    example). Per layer and step at the benchmark shape (8 examples, 256 sources, d 256,
    one thread, cache out of L3): one query row took 104 us against 259 us transposed;
    four rows 237 us transposed against 385 us. Off the CPU the keys stay as they come:
    SDPA reads them there. `keys` and `keys_t` are the (B, K, S, D) and (B, K, D, S) views
    of the same memory either way.
    """

    def __init__(self, transposed: bool = False):
        self.transposed = transposed
        self.stored_keys: torch.Tensor | None = None  # (B, K, D, S) if transposed, else (B, K, S, D)
        self.values: torch.Tensor | None = None  # (B, K, S, D)

    @property
    def frozen(self) -> bool:
        return self.stored_keys is not None

    @property
    def keys(self) -> torch.Tensor | None:
        if self.stored_keys is None or not self.transposed:
            return self.stored_keys
        return self.stored_keys.transpose(-1, -2)

    @property
    def keys_t(self) -> torch.Tensor | None:
        keys = self.keys
        return None if keys is None else keys.transpose(-1, -2)

    @property
    def length(self) -> int:
        return 0 if self.stored_keys is None else self.keys.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.transposed = self.transposed and k.device.type == "cpu"  # elsewhere SDPA reads them, as they come
        self.stored_keys = (k.transpose(-1, -2) if self.transposed else k).contiguous()
        self.values = v.contiguous()
        return self.keys, self.values

    def reorder(self, index: torch.Tensor) -> None:
        if self.stored_keys is not None:
            self.stored_keys = self.stored_keys.index_select(0, index)
            self.values = self.values.index_select(0, index)


@dataclass
class LayerCache:
    """The caches of one decoder layer: its self-attention's and its cross-attention's."""

    self_attn: object  # a SelfAttentionCache (encdec.modules.layer_caches)
    cross_attn: object  # a SelfAttentionCache (the research families' advancing encoder) or a StaticKVCache
