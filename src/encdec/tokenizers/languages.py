"""The language codes of a multilingual Hugging Face tokenizer (NLLB's eng_Latn, fra_Latn, ...; mBART-50's
en_XX; M2M100's en, fr, ... written __en__, __fr__), as generate's src_lang and tgt_lang name them.

    src_lang  the code the tokenizer puts around each source (NLLB: `eng_Latn ... </s>`; legacy: at the end)
    tgt_lang  the code generation forces first after the decoder start: forced_bos_token_id, as transformers'
              translation pipeline sets it

A code is one of the tokenizer's special tokens other than its roles (pad, EOS, ...), or one of M2M100's
table of codes, on a tokenizer that takes a `src_lang`; anything else is one sentence. Setting a tokenizer's src_lang changes the tokenizer
itself, so `encode_in` sets it, encodes and sets it back under one lock: a server's requests in different
languages never see each other's.
"""

import threading

from encdec.errors import ConfigError, DataError, suggestion

ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
LOCK = threading.Lock()  # held while a tokenizer's src_lang is not its own


def hf_tokenizer_of(text):
    """The Hugging Face tokenizer behind a text encoder: itself, a run's pretrained one (RunTokenizer over a
    PretrainedTokenizer), or None."""
    if hasattr(text, "convert_tokens_to_ids"):
        return text
    return getattr(getattr(text, "tokenizer", None), "hf", None)


def takes_languages(tokenizer) -> bool:
    return tokenizer is not None and isinstance(getattr(type(tokenizer), "src_lang", None), property)


def code_tokens(tokenizer) -> dict[str, str]:
    """Each language code a multilingual tokenizer knows -> its token: M2M100's `en` -> `__en__`
    (lang_code_to_token), else each special token that plays no role is its own code (NLLB, mBART-50);
    {} for other tokenizers."""
    if not takes_languages(tokenizer):
        return {}
    table = getattr(tokenizer, "lang_code_to_token", None)
    if isinstance(table, dict):
        return dict(table)
    roles = {getattr(tokenizer, role, None) for role in ROLES}
    return {token: token for token in tokenizer.all_special_tokens if token not in roles}


def language_id(tokenizer, code: str, option: str) -> int:
    """The token id of language `code`; one sentence (ConfigError) naming `option` where the tokenizer has
    no language codes or not this one."""
    codes = code_tokens(tokenizer)
    if not codes:
        raise ConfigError(
            f"{option} needs a multilingual tokenizer with language codes (NLLB's, mBART-50's); this one has "
            "none (in Python, pass it as generate(..., tokenizer=))"
        )
    if code not in codes:
        raise ConfigError(f"{option} {code!r} is not a language code of this tokenizer{suggestion(code, list(codes))}")
    return tokenizer.convert_tokens_to_ids(codes[code])


def source_tokenizer(text, src_lang: str):
    """The tokenizer that puts `src_lang`'s code around each input: `text` itself, a Hugging Face tokenizer
    that knows the code; else one sentence (ConfigError)."""
    if hf_tokenizer_of(text) is not text:
        raise ConfigError(
            "src_lang needs a Hugging Face directory's own tokenizer, which puts the code around each input; "
            "a run's tokenizer adds none"
        )
    language_id(text, src_lang, "src_lang")
    return text


def encode_in(text, texts: list[str], src_lang: str | None = None, **kwargs) -> dict:
    """`text(texts, **kwargs)` with the tokenizer's source language set to `src_lang` (None: its own), under
    the lock, the tokenizer's own language restored after."""
    with LOCK:
        if src_lang is None:
            return text(texts, **kwargs)
        tokenizer = source_tokenizer(text, src_lang)
        own = tokenizer.src_lang
        try:
            tokenizer.src_lang = src_lang
            return tokenizer(texts, **kwargs)
        finally:
            tokenizer.src_lang = own


def set_languages(text, src_lang: str | None, tgt_lang: str | None) -> None:
    """Make `src_lang` and `tgt_lang` the languages `text` encodes sources and references in, for a command
    that encodes on one thread (encdec evaluate: its inputs, and references as `text_target`)."""
    if src_lang is not None:
        source_tokenizer(text, src_lang).src_lang = src_lang
    if tgt_lang is not None and hf_tokenizer_of(text) is text:
        language_id(text, tgt_lang, "tgt_lang")
        text.tgt_lang = tgt_lang


def generation_languages(tokenizer, src_lang, tgt_lang, forced_given, src_ids, src_mask) -> int | None:
    """generate's src_lang and tgt_lang checked against `tokenizer`: every input row holds src_lang's token
    among its real tokens (src_ids, src_mask (B, S)), and tgt_lang is a code of the tokenizer. Returns the
    forced_bos_token_id tgt_lang names (None without one); a forced_bos_token_id given beside it naming
    another token, or a tokenizer without the code (None included), is one sentence."""
    if src_lang is not None:
        code = language_id(tokenizer, src_lang, "src_lang")
        holds = ((src_ids == code) & src_mask).any(dim=1)  # (B,)
        if not bool(holds.all()):
            row = int((~holds).long().argmax())
            raise DataError(
                f"input row {row} does not hold src_lang {src_lang}'s token {code}: encode the inputs with "
                f"tokenizer.src_lang = {src_lang!r}"
            )
    if tgt_lang is None:
        return None
    forced = language_id(tokenizer, tgt_lang, "tgt_lang")
    if forced_given is not None and forced_given != forced:
        raise ConfigError(f"tgt_lang {tgt_lang} is token {forced} but forced_bos_token_id is {forced_given}; give one")
    return forced


def as_forced_token(text, options: dict, src_ids, src_mask) -> dict:
    """`options` as generate takes them without the tokenizer (the server's scheduler, evaluate's batches),
    once `encode_in` has encoded the inputs src_ids, src_mask (B, S): src_lang and tgt_lang checked as
    generate checks them, tgt_lang become the forced_bos_token_id it names, both dropped."""
    src_lang, tgt_lang = options.get("src_lang"), options.get("tgt_lang")
    rest = {key: value for key, value in options.items() if key not in ("src_lang", "tgt_lang")}
    if src_lang is None and tgt_lang is None:
        return rest
    given = options.get("forced_bos_token_id")
    forced = generation_languages(hf_tokenizer_of(text), src_lang, tgt_lang, given, src_ids, src_mask.bool())
    return rest if forced is None else {**rest, "forced_bos_token_id": forced}
