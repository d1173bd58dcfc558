"""A server's request options resolved once per distinct set: `resolve_config` (generation.generate: the options
read over the model's defaults, every field checked) costs about 40 us a request, and a request asked it twice
(in its thread, then as the scheduler checks it), while a server's requests repeat a few sets (greedy with a
length, sampling with a temperature). The second request of a set takes a copy of the first's config.

Only sets of plain values are kept (numbers, strings, booleans, None, lists and mappings of them, each value's type
in its key, so 1 and True stay apart): a streamer or a generator is the request's own. At most MOST_SETS sets are
kept, so no client grows the cache; a refusal is never kept (each request of a bad set is refused anew).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from encdec.generation.config import GenerationConfig
from encdec.generation.generate import resolve_config

MOST_SETS = 256  # distinct option sets kept
NOT_RESOLVED = ("defaults", "tokenizer", "decoder_input_ids")  # generate's arguments that are not options


class ResolvedOptions:
    """`resolve_config(model, options, defaults)` of a request's options (generate's keyword arguments: `defaults`
    and the other arguments that are not options left out), from the sets already resolved where it can."""

    def __init__(self, model):
        self.model, self.sets, self.lock = model, {}, threading.Lock()

    def __call__(self, options: dict[str, Any]) -> GenerationConfig:
        given = {k: v for k, v in options.items() if k not in NOT_RESOLVED}
        defaults = options.get("defaults")
        key = plain_key((given, defaults))
        if key is None:
            return resolve_config(self.model, given, defaults)
        with self.lock:
            cfg = self.sets.get(key)
        if cfg is None:
            cfg = resolve_config(self.model, given, defaults)  # a refusal raises here, kept nowhere
            with self.lock:
                if len(self.sets) < MOST_SETS:
                    self.sets[key] = cfg
        return copy.copy(cfg)  # the request's own: prepare sets some of its fields


def plain_key(value: Any) -> tuple | None:
    """A hashable key of `value` made of plain values, each with its type's name, else None."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        items = [plain_key(item) for item in value]
        return None if any(item is None for item in items) else (type(value).__name__, *items)
    if isinstance(value, dict):
        items = [(plain_key(k), plain_key(v)) for k, v in value.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return ("dict", *sorted(items))
    return None
