"""The language codes of a multilingual Hugging Face tokenizer (NLLB's eng_Latn, fra_Latn, ...; mBART-50's
en_XX; M2M100's en, fr, ... written __en__, __fr__), as generate's src_lang and tgt_lang name them.

    src_lang  the code put around each source (NLLB: `eng_Latn ... </s>`; legacy and mBART: at the end)
    tgt_lang  the code generation forces first after the decoder start: forced_bos_token_id, as transformers'
              translation pipeline sets it

A code is one of the tokenizer's special tokens other than its roles (pad, EOS, ...), or one of M2M100's
table of codes, on a tokenizer that takes a `src_lang`; anything else is one sentence. The tokenizer is never
changed: `encode_in` reads where it puts its own language's code (its `prefix_tokens` and `suffix_tokens`,
the rule NllbTokenizer, M2M100Tokenizer, MBartTokenizer and MBart50Tokenizer declare), puts the asked
code there around the text's own ids, and cuts and pads as the tokenizer does; so a server's requests in
different languages encode at once, with no lock. References in a tgt_lang (encdec evaluate's) take the same
place, as those tokenizers' target mode gives them (`in_language`).
"""

import torch

from encdec.errors import ConfigError, DataError, suggestion
from encdec.tokenizers.padding import padded

DECODER_FROM_LAST = ("MBartTokenizer", "PLBartTokenizer")  # see code_starts_decoder
ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


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


def source_tokenizer(tokenizer, src_lang: str):
    """`tokenizer`, a Hugging Face tokenizer that knows `src_lang`'s code; else one sentence (ConfigError)."""
    language_id(tokenizer, src_lang, "src_lang")
    return tokenizer


def code_placement(tokenizer, code: str, option: str = "src_lang") -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids `tokenizer` puts before and after a text's own ids in language `code`, read
    from the rule it declares for its own src_lang (its `prefix_tokens` and `suffix_tokens`, NLLB's
    [eng_Latn] and [</s>], mBART's [] and [</s>, en_XX]) with its own code's id replaced by `code`'s. One
    sentence (ConfigError, naming `option`) for a code it lacks or a tokenizer that places no code."""
    wanted = language_id(tokenizer, code, option)
    if tokenizer.src_lang is None:  # PLBart's loads so: its prefix and suffix then show no code's place
        raise ConfigError(
            f"{option} has no place: {type(tokenizer).__name__} was loaded without a src_lang of its own, which "
            "shows where its codes go; load it with src_lang set"
        )
    own = language_id(tokenizer, tokenizer.src_lang, "the tokenizer's own src_lang")
    prefix, suffix = list(tokenizer.prefix_tokens), list(tokenizer.suffix_tokens)
    if own not in prefix + suffix:
        raise ConfigError(f"{option} has no place: {type(tokenizer).__name__} puts no language code around an input")
    return [wanted if i == own else i for i in prefix], [wanted if i == own else i for i in suffix]


def in_language(tokenizer, texts: list[str], code: str, option: str = "src_lang", cut: bool = True) -> list[list[int]]:
    """Each text's ids as `tokenizer` gives them once its src_lang is `code` (tgt_lang for references: the
    same place), the tokenizer left as it is: the text's own ids between `code_placement`'s, cut (`cut`) to
    its model_max_length on its truncation side. The own ids are asked with padding and truncation as every
    encoding of a source asks them, so a fast tokenizer's backend settings never change under another thread."""
    prefix, suffix = code_placement(tokenizer, code, option)
    own = tokenizer(texts, add_special_tokens=False, padding=cut, truncation=cut)
    room = max(tokenizer.model_max_length - len(prefix) - len(suffix), 0) if cut else None
    rows = []
    for ids, mask in zip(own["input_ids"], own["attention_mask"], strict=True):
        ids = [i for i, real in zip(ids, mask, strict=True) if real]
        if room is not None:
            ids = ids[max(len(ids) - room, 0) :] if tokenizer.truncation_side == "left" else ids[:room]
        rows.append([*prefix, *ids, *suffix])
    return rows


def encode_in(tokenizer, texts: list[str], code: str) -> dict[str, torch.Tensor]:
    """What `tokenizer(texts, return_tensors="pt", padding=True, truncation=True)` gives once its src_lang is
    `code`, the tokenizer left as it is: input_ids and attention_mask (B, S), padded on its padding side."""
    rows = in_language(tokenizer, texts, code)
    return padded(rows, tokenizer.pad_token_id, tokenizer.padding_side, torch.long)  # as Hugging Face pads


def code_starts_decoder(tokenizer) -> bool:
    """Whether a target language's code starts the decoder rather than being forced as the first generated
    token: mBART's and PLBart's tokenizers put a target's code last and their models' shift_tokens_right
    wraps a label's last token to the front (transformers' run_translation.py sets decoder_start_token_id to
    the code); NLLB's, M2M100's and mBART-50's put it first, to be forced (NLLB's legacy placement puts it last,
    but M2M100's model starts from </s>)."""
    return type(tokenizer).__name__.removesuffix("Fast") in DECODER_FROM_LAST


def target_language(tokenizer, tgt_lang: str, option: str = "tgt_lang") -> tuple[int | None, int | None]:
    """(forced_bos_token_id, decoder_start_token_id) for writing in `tgt_lang`: its code forced first where the
    family forces it, the decoder started from it for mBART and PLBart (`code_starts_decoder`); one sentence
    naming `option` for a code the tokenizer lacks."""
    code = language_id(tokenizer, tgt_lang, option)
    return (None, code) if code_starts_decoder(tokenizer) else (code, None)


def generation_languages(
    tokenizer, src_lang, tgt_lang, forced_given, src_ids, src_mask
) -> tuple[int | None, int | None]:
    """generate's src_lang and tgt_lang checked against `tokenizer`: every input row holds src_lang's token
    among its real tokens (src_ids, src_mask (B, S)), and tgt_lang is a code of the tokenizer. Returns
    `target_language`'s (forced_bos_token_id, decoder_start_token_id); (None, None) without tgt_lang. A
    forced_bos_token_id given beside it naming another token, or a tokenizer without the code (None
    included), is one sentence."""
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
        return None, None
    forced, start = target_language(tokenizer, tgt_lang)
    if forced is not None and forced_given is not None and forced_given != forced:
        raise ConfigError(f"tgt_lang {tgt_lang} is token {forced} but forced_bos_token_id is {forced_given}; give one")
    return forced, start
