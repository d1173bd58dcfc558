"""Key/value caches for incremental decoding.

Keys and values are stored per KV head (B, K, S, D), after RoPE, so a grouped-
query layer caches K heads, not H, and nothing is rotated twice. Beams reorder a
cache by indexing its batch dimension.

Shapes: B batch, K kv heads, S cached length, D head dim.
"""

from dataclasses import dataclass

import torch


class KVCache:
    """A cache that grows: each call appends the new positions' keys and values.

    Used for self-attention, and for cross-attention when the encoder advances
    with the decoder (the auto-regressive and parallel encoder-decoders). The
    buffer is allocated once for `max_len` positions and doubled if outgrown.
    """

    frozen = False

    def __init__(self, max_len: int):
        self.max_len = max_len
        self.length = 0
        self.keys: torch.Tensor | None = None  # (B, K, max_len, D)
        self.values: torch.Tensor | None = None
        self._spare: tuple[torch.Tensor, torch.Tensor] | None = None  # the buffers `reorder` gathers into

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (B, K, t, D) -> all cached keys and values (B, K, length + t, D)."""
        B, K, t, D = k.shape
        end = self.length + t
        if self.keys is None:
            self.keys = k.new_empty(B, K, max(self.max_len, end), D)
            self.values = v.new_empty(B, K, max(self.max_len, end), D)
        elif end > self.keys.shape[2]:
            self.keys = _grow(self.keys, end)
            self.values = _grow(self.values, end)
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (B',), e.g. the surviving beams.

        When the batch size stays, every row's filled positions are gathered into a second
        buffer of the same size, which then becomes the cache (the two swap at every reorder):
        one read and one write of the filled positions, no allocation, and nothing waits for
        the host to learn which rows moved. Gathering into a temporary and copying it back
        read and wrote them twice (68 against 41 us per layer's keys for 32 beams of 50
        positions, d 256, on one thread); copying only the rows that moved took a `nonzero`
        per layer and step, a GPU sync each, and was no faster on CPU.
        """
        if self.keys is None:
            return
        if index.shape[0] != self.keys.shape[0]:
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)
            self._spare = None
            return
        if self._spare is None or self._spare[0].shape != self.keys.shape:
            self._spare = (torch.empty_like(self.keys), torch.empty_like(self.values))
        n = self.length
        spare_k, spare_v = self._spare
        torch.index_select(self.keys[:, :, :n], 0, index, out=spare_k[:, :, :n])
        torch.index_select(self.values[:, :, :n], 0, index, out=spare_v[:, :, :n])
        self._spare = (self.keys, self.values)
        self.keys, self.values = spare_k, spare_v


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


def _grow(buffer: torch.Tensor, needed: int) -> torch.Tensor:
    B, K, size, D = buffer.shape
    grown = buffer.new_empty(B, K, max(2 * size, needed), D)
    grown[:, :, :size] = buffer
    return grown


@dataclass
class LayerCache:
    """The caches of one decoder layer: its self-attention and its cross-attention."""

    self_attn: KVCache
    cross_attn: KVCache | StaticKVCache


class DecoderCache:
    """All decoder layers' caches; `offset` is the number of positions already decoded."""

    def __init__(self, n_layers: int, max_len: int, growing_cross: bool = False, cross_transposed: bool = False):
        """cross_transposed: the static cross-attention keys transposed, for several query rows per example
        (see StaticKVCache)."""
        self.layers = [
            LayerCache(KVCache(max_len), KVCache(max_len) if growing_cross else StaticKVCache(cross_transposed))
            for _ in range(n_layers)
        ]

    @property
    def offset(self) -> int:
        return self.layers[0].self_attn.length if self.layers else 0

    def reorder(self, index: torch.Tensor) -> None:
        for layer in self.layers:
            layer.self_attn.reorder(index)
            layer.cross_attn.reorder(index)
