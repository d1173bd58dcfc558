"""Stop strings: a row stops once its decoded text ends with one, with Hugging Face's StopStringCriteria rules.

A stop string may span several tokens, and the row's last token may run past its end
and its first token start before it: for "stop", the tokens "st" + "opper" and
"las" + "top" both stop a row, "stop" + "at" does not (the string must end inside
the last token). Every token's text is matched against the strings once, on the host;
each step then walks back over the last tokens with table lookups on the device, no
host sync. A token's text is what the tokenizer decodes it to inside a word (HF's
static-prefix trick), in bytes for byte-level and byte-fallback vocabularies.

Shapes: R rows, L tokens so far, W tokens looked at (the longest stop string's length),
T table rows (largest token id + 2; the last row stands for ids the tokenizer lacks),
E most ways one token can cover a string's end.
"""

import json

import torch

from encdec.errors import ConfigError

PREFIX = "abcdef"  # decoded before each token, then cut away, so word-initial markers do not show
CACHE: dict[tuple, "StopStrings"] = {}  # the last few matchers made, by vocabulary, strings, mode and device


class StopStrings:
    """Callable on token ids (R, L) -> (R,) bool: which rows' text now ends with a stop string."""

    def __init__(self, stop_strings: list[str | bytes], texts: dict[int, str | bytes], device=None):
        size = max(texts) + 2
        self.window = max(len(s) for s in stop_strings)
        lengths = torch.zeros(size, dtype=torch.long)
        for token, text in texts.items():
            lengths[token] = len(text)
        tables = [self._tables(s, texts, size) for s in stop_strings]  # on the host
        if not any(ends.any() for _, ends, _ in tables):
            raise ConfigError("no token of the tokenizer can end any of the stop strings")
        self.lengths = lengths.to(device)
        self.tables = [(m, ends.to(device), fits.to(device)) for m, ends, fits in tables]

    @staticmethod
    def _tables(stop: str | bytes, texts: dict, size: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        """For one string of length m: ends (T, E), how many of its last characters each token can cover
        (0: none), and fits (T, m), whether a token can sit with p of its characters after it."""
        m = len(stop)
        ends = {token: sorted(end_overlaps(text, stop)) for token, text in texts.items()}
        width = max(1, max(len(e) for e in ends.values()))
        end_table = torch.zeros(size, width, dtype=torch.long)
        fit_table = torch.zeros(size, m, dtype=torch.bool)
        for token, text in texts.items():
            end_table[token, : len(ends[token])] = torch.tensor(ends[token], dtype=torch.long)
            for p in range(1, m):
                fit_table[token, p] = text.endswith(stop[max(0, m - p - len(text)) : m - p])
        return m, end_table, fit_table

    def __call__(self, seqs: torch.Tensor) -> torch.Tensor:
        ids = seqs[:, -self.window :].clamp(max=self.lengths.shape[0] - 1)  # (R, W)
        hit = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        for m, ends, fits in self.tables:
            covered = ends[ids[:, -1]]  # (R, E): characters of the string's end the last token covers
            found = covered >= m
            alive = (covered > 0) & ~found
            for back in range(2, ids.shape[1] + 1):  # earlier tokens must fit just before what is covered
                token = ids[:, -back]  # (R,)
                fits_here = fits[token].gather(1, covered.clamp(max=m - 1))  # (R, E)
                alive = alive & fits_here
                covered = covered + self.lengths[token][:, None]
                found |= alive & (covered >= m)
                alive &= covered < m
            hit |= found.any(dim=-1)
        return hit


def end_overlaps(text: str | bytes, stop: str | bytes) -> set[int]:
    """How many of stop's last characters `text` can cover when stop ends inside it, after text[:j]."""
    m, covered = len(stop), set()
    for j in range(1, len(text) + 1):
        head = text[:j]
        if (j <= m and stop.endswith(head)) or (j > m and head.endswith(stop)):
            covered.add(min(j, m))
    return covered


def stop_strings_for(stop_strings: list[str], tokenizer, device=None) -> StopStrings:
    """The matcher for a Hugging Face tokenizer (one with get_vocab and convert_tokens_to_string)."""
    if tokenizer is None:
        raise ConfigError("stop_strings needs the tokenizer: pass tokenizer= to generate, as Hugging Face asks")
    if not all(hasattr(tokenizer, name) for name in ("get_vocab", "convert_tokens_to_string", "convert_ids_to_tokens")):
        raise ConfigError("stop_strings needs a Hugging Face tokenizer (with get_vocab and convert_tokens_to_string)")
    mode = matching_mode(tokenizer)
    strings = [s.encode() for s in stop_strings] if mode else list(stop_strings)
    key = (tuple(tokenizer.get_vocab().items()), tuple(strings), mode, str(device))
    if key not in CACHE:  # a CLI calls generate once per batch; the tables are made once per vocabulary
        if len(CACHE) >= 8:
            CACHE.pop(next(iter(CACHE)))
        CACHE[key] = StopStrings(strings, token_texts(tokenizer, mode), device)
    return CACHE[key]


def token_texts(tokenizer, mode: str | None) -> dict[int, str | bytes]:
    """Each token id's text as it reads inside a word: decoded after PREFIX, which is then cut away."""
    base = tokenizer.convert_ids_to_tokens(tokenizer(PREFIX, add_special_tokens=False)["input_ids"])
    byte_decoder = gpt2_byte_decoder() if mode == "byte_level" else {}
    texts = {}
    for token, index in tokenizer.get_vocab().items():
        text = token_bytes(token, mode, byte_decoder)
        if text is None:
            decoded = tokenizer.convert_tokens_to_string([*base, token])
            if PREFIX not in decoded:
                raise ConfigError("stop_strings cannot be matched: this tokenizer does not decode tokens to text")
            text = decoded[decoded.index(PREFIX) + len(PREFIX) :]
            text = text.encode() if mode else text
        texts[index] = text
    return texts


def matching_mode(tokenizer) -> str | None:
    """The matching mode, from the tokenizer's decoder: byte_level (GPT-2 style), byte_fallback (<0xNN>
    tokens) or None (text)."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if decoder is None:
        return None
    if type(decoder).__name__ == "ByteLevel":
        return "byte_level"
    state = getattr(decoder, "__getstate__", lambda: None)()
    try:
        kinds = set(decoder_types(json.loads(state))) if isinstance(state, (str, bytes)) else set()
    except json.JSONDecodeError:
        kinds = set()
    return "byte_fallback" if "ByteFallback" in kinds else "byte_level" if "ByteLevel" in kinds else None


def decoder_types(config):
    """Every "type" named anywhere in a decoder's JSON state."""
    if isinstance(config, dict):
        if "type" in config:
            yield config["type"]
        for value in config.values():
            yield from decoder_types(value)
    elif isinstance(config, list):
        for value in config:
            yield from decoder_types(value)


def token_bytes(token: str, mode: str | None, byte_decoder: dict[str, int]) -> bytes | None:
    """A byte-level token's bytes, or a <0xNN> byte-fallback token's byte; None for other tokens."""
    if mode == "byte_level" and all(char in byte_decoder for char in token):
        return bytes(byte_decoder[char] for char in token)
    hex_digits = "0123456789abcdefABCDEF"
    is_hex = len(token) == 6 and token[:3] == "<0x" and token[5] == ">" and all(c in hex_digits for c in token[3:5])
    if mode == "byte_fallback" and is_hex:
        return bytes([int(token[3:5], 16)])
    return None


def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, read backwards: printable bytes stand for themselves, the rest for 256 + n."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return {char: b for b, char in chars.items()}
