"""A multilingual tokenizer's language code placed without changing the tokenizer (tokenizers.languages):
the ids equal the tokenizer's own once its src_lang (tgt_lang for references) is set, for NLLB (its default
and legacy placements), M2M100, mBART and mBART-50 tokenizers built offline from tiny vocabularies; and
many threads encoding in different languages at once each get their own ids, the tokenizer unchanged."""

import threading

import pytest
import torch

from encdec.errors import ConfigError
from encdec.generation.text_generator import TextGenerator
from encdec.tokenizers.languages import code_placement, encode_in, in_language
from tests.tokenizers.language_kit import FAMILIES, nllb

transformers = pytest.importorskip("transformers")

TEXTS = ["the cat sat on the mat", "a dog", "that cat at the end of a long line of words"]
SHAPES = {  # how the tokenizer cuts and pads: its defaults, or short inputs cut and padded on the left
    "own": {},
    "cut-left": {"model_max_length": 6, "truncation_side": "left", "padding_side": "left"},
    "cut-right": {"model_max_length": 7},
}


def snapshot(tokenizer) -> dict:
    """Everything a tokenizer holds that a language could change: its attributes and its backend's rules."""
    held = {name: repr(value) for name, value in vars(tokenizer).items() if name != "deprecation_warnings"}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return held | ({"backend": backend.to_str()} if backend is not None else {})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_code_is_placed_as_the_tokenizer_places_it_with_src_lang_set(family, shape, tmp_path):
    make, codes = FAMILIES[family]
    ours = make(tmp_path, **SHAPES[shape])
    encode_in(ours, TEXTS, codes[-1])  # a fast tokenizer's first call settles its backend's padding and cut
    before = snapshot(ours)
    for code in codes:
        theirs = make(tmp_path, src_lang=code, **SHAPES[shape])
        expected = theirs(TEXTS, return_tensors="pt", padding=True, truncation=True)
        got = encode_in(ours, TEXTS, code)
        assert torch.equal(got["input_ids"], expected["input_ids"]), (family, code)
        assert torch.equal(got["attention_mask"], expected["attention_mask"]), (family, code)
        assert got["input_ids"].dtype == got["attention_mask"].dtype == torch.long
    assert snapshot(ours) == before


@pytest.mark.parametrize("family", FAMILIES)
def test_a_reference_in_tgt_lang_is_what_text_target_gives(family, tmp_path):
    make, codes = FAMILIES[family]
    ours = make(tmp_path)
    for code in codes:
        theirs = make(tmp_path, tgt_lang=code)
        expected = theirs(text_target=TEXTS)["input_ids"]
        assert in_language(ours, TEXTS, code, "tgt_lang", cut=False) == expected, (family, code)


def test_a_code_the_tokenizer_lacks_or_cannot_place_is_one_sentence(tmp_path):
    with pytest.raises(ConfigError, match="src_lang 'xx_Latn' is not a language code of this tokenizer"):
        encode_in(nllb(), TEXTS, "xx_Latn")
    tokenizer = nllb()
    tokenizer.prefix_tokens, tokenizer.suffix_tokens = [], [tokenizer.eos_token_id]  # declares no place
    with pytest.raises(ConfigError, match="src_lang has no place: NllbTokenizer puts no language code"):
        code_placement(tokenizer, "fra_Latn")
    tokenizer = nllb()
    tokenizer._src_lang = None  # as PLBart's tokenizer loads without a src_lang: no code shows the place
    with pytest.raises(ConfigError, match="src_lang has no place: NllbTokenizer was loaded without a src_lang"):
        code_placement(tokenizer, "fra_Latn")


@pytest.mark.parametrize("family", ["nllb", "m2m100"])
def test_many_threads_encoding_in_different_languages_each_get_their_own_ids(family, tmp_path):
    """Eight threads, released together, each encode in their language (or the tokenizer's own: None) 20
    times through one shared tokenizer (a fast one and a Python one): every result is the tokenizer's own
    with that src_lang, and the shared tokenizer's language never changes while they run, nor anything it
    holds (no src_lang set, no lock)."""
    make, codes = FAMILIES[family]
    shared = make(tmp_path)
    generator = TextGenerator(shared)
    expected = {code: make(tmp_path, src_lang=code)(TEXTS, return_tensors="pt", padding=True) for code in codes}
    codes, expected[None] = [*codes, None], make(tmp_path)(TEXTS, return_tensors="pt", padding=True)
    generator.encode(TEXTS, codes[0])  # a fast tokenizer's first call settles its backend's padding and cut
    before = snapshot(shared)
    start, wrong, failed = threading.Barrier(8), [], []

    def encode(code: str | None) -> None:
        try:
            start.wait()
            for _ in range(20):
                got = generator.encode(TEXTS, code)
                if not torch.equal(got["input_ids"], expected[code]["input_ids"]):
                    wrong.append(code)
        except Exception as error:  # noqa: BLE001 - a thread's failure is the test's
            failed.append(error)

    threads = [threading.Thread(target=encode, args=(codes[i % len(codes)],)) for i in range(8)]
    for thread in threads:
        thread.start()
    seen = set()  # the tokenizer's language while they run, looked at as often as the main thread can
    while any(thread.is_alive() for thread in threads):
        seen.add((shared.src_lang, tuple(shared.prefix_tokens), tuple(shared.suffix_tokens)))
    for thread in threads:
        thread.join(timeout=120)
    assert failed == [] and wrong == []
    assert seen <= {(shared.src_lang, tuple(shared.prefix_tokens), tuple(shared.suffix_tokens))}
    assert snapshot(shared) == before
