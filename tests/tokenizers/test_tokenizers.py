import json

import pytest

from encdec.errors import ConfigError, DataError
from encdec.tokenizers import MANIFEST_NAME, build_tokenizer, load_tokenizer
from encdec.tokenizers.hf import train_tokenizer


@pytest.fixture(scope="module")
def mistral(mistral_model):
    return build_tokenizer("sentencepiece", mistral_model)


@pytest.fixture(scope="module")
def trained_bpe(tinystories_stories):
    return train_tokenizer(tinystories_stories[:600], kind="bpe", vocab_size=1200, num_sentinels=20)


def test_mistral_has_rot5_vocabulary_of_32502_ids(mistral):
    assert mistral.vocab_size == 32_000 + 502
    assert (mistral.bos_id, mistral.eos_id) == (1, 2)


def test_mistral_added_specials_are_distinct_and_outside_base_vocabulary(mistral):
    added = [mistral.pad_id, mistral.decoder_start_id, *mistral.sentinel_ids]
    assert len(set(added)) == len(added) == 502
    assert min(added) >= 32_000 and max(added) < mistral.vocab_size
    assert mistral.sentinel_ids == sorted(mistral.sentinel_ids)


def test_mistral_round_trips_the_tinystories_sample(mistral, tinystories_stories):
    encoded = mistral.encode(tinystories_stories, add_eos=True, add_bos=True)
    assert all(ids[0] == mistral.bos_id and ids[-1] == mistral.eos_id for ids in encoded)
    assert mistral.decode(encoded) == tinystories_stories


def test_mistral_encodes_the_readme_example_into_its_pieces(mistral):
    [ids] = mistral.encode(["Once upon a time, there was a little girl named Lily."])
    pieces = [mistral.processor.id_to_piece(i) for i in ids]
    assert pieces == "▁Once ▁upon ▁a ▁time , ▁there ▁was ▁a ▁little ▁girl ▁named ▁Lily .".split()


def test_decode_writes_specials_by_name_unless_skipped(mistral):
    [ids] = mistral.encode(["a cat"])
    row = ids + [mistral.sentinel_ids[3], mistral.eos_id]
    assert mistral.decode([row], skip_special=False) == ["a cat[MASK-3]</s>"]
    assert mistral.decode([row]) == ["a cat"]
    first, second = mistral.encode(["Once upon a", "time there"])
    assert mistral.decode([first + [mistral.sentinel_ids[0]] + second], skip_special=False) == [
        "Once upon a[MASK-0] time there"
    ]


@pytest.mark.parametrize("kind", ["byte", "bpe", "sentencepiece"])
def test_saved_tokenizer_loads_back_with_the_same_ids(kind, tmp_path, mistral_model, tinystories_stories):
    texts = tinystories_stories[:30]
    if kind == "bpe":
        tokenizer = build_tokenizer("bpe", texts=texts, vocab_size=600, num_sentinels=5, extra_specials=("[R]",))
    elif kind == "sentencepiece":
        tokenizer = build_tokenizer("sentencepiece", mistral_model, num_sentinels=7)
    else:
        tokenizer = build_tokenizer("byte", extra_specials=("[R]", "[X]", "[S]"))
    loaded = load_tokenizer(tokenizer.save(tmp_path / "tok"))
    assert type(loaded) is type(tokenizer)
    assert loaded.specials == tokenizer.specials and loaded.vocab_size == tokenizer.vocab_size
    assert loaded.encode(texts, add_eos=True) == tokenizer.encode(texts, add_eos=True)
    assert loaded.fingerprint() == tokenizer.fingerprint()


def test_byte_tokenizer_round_trips_any_unicode_and_puts_specials_after_256():
    tokenizer = build_tokenizer("byte", num_sentinels=10)
    texts = ["héllo wörld ✓\n", "", "日本語"]
    assert tokenizer.decode(tokenizer.encode(texts, add_eos=True)) == texts
    assert tokenizer.vocab_size == 256 + 3 + 10 + 1
    assert min(tokenizer.sentinel_ids + [tokenizer.pad_id, tokenizer.decoder_start_id]) == 256


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_trained_tokenizer_has_the_requested_vocabulary_and_round_trips(kind, tinystories_stories):
    tokenizer = train_tokenizer(tinystories_stories[:400], kind=kind, vocab_size=900, num_sentinels=8)
    assert tokenizer.vocab_size == 900
    seen = tinystories_stories[:50]  # unigram maps characters unseen in training to <unk>
    assert tokenizer.decode(tokenizer.encode(seen)) == seen
    specials = [
        tokenizer.pad_id,
        tokenizer.eos_id,
        tokenizer.bos_id,
        tokenizer.decoder_start_id,
        *tokenizer.sentinel_ids,
    ]
    assert len(set(specials)) == len(specials)


def test_trained_bpe_compresses_text_better_than_bytes(trained_bpe, tinystories_stories):
    text = tinystories_stories[1000]
    assert len(trained_bpe.encode([text])[0]) < len(text.encode()) / 2.5


def test_loaded_hf_json_gets_missing_specials_appended(tmp_path, trained_bpe):
    trained_bpe.tokenizer.save(str(tmp_path / "plain.json"))
    loaded = build_tokenizer("hf", tmp_path / "plain.json", num_sentinels=30)
    assert loaded.sentinel_ids[:20] == trained_bpe.sentinel_ids
    assert loaded.sentinel_ids[20] == trained_bpe.vocab_size
    assert loaded.vocab_size == trained_bpe.vocab_size + 10


def test_tokenizer_file_that_does_not_parse_names_the_file(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"model": ')
    with pytest.raises(DataError, match=r"broken\.json does not parse"):
        build_tokenizer("hf", bad)
    bad_model = tmp_path / "broken.model"
    bad_model.write_bytes(b"not a protobuf at all")
    with pytest.raises(DataError, match=r"broken\.model does not parse"):
        build_tokenizer("sentencepiece", bad_model)


def test_vocabulary_too_small_for_the_specials_is_a_config_error(tinystories_stories):
    with pytest.raises(ConfigError, match="too small"):
        train_tokenizer(tinystories_stories[:10], kind="bpe", vocab_size=300, num_sentinels=100)


def test_unknown_kind_and_bad_manifest_are_one_sentence_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown tokenizer kind 'wordpiece'"):
        build_tokenizer("wordpiece")
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"kind": "wordpiece"}))
    with pytest.raises(DataError, match="kind must be one of byte"):
        load_tokenizer(tmp_path)
    with pytest.raises(DataError, match="has no"):
        load_tokenizer(tmp_path / "missing")


def test_encode_takes_one_string_as_one_text_not_as_its_characters():
    from encdec.tokenizers import build_tokenizer

    tok = build_tokenizer("byte", num_sentinels=0)
    assert tok.encode("hi there") == tok.encode(["hi there"])[0]
    assert tok.encode("hi", add_eos=True) == tok.encode(["hi"], add_eos=True)[0]
    with pytest.raises(DataError, match="a string or a list of strings"):
        tok.encode([b"bytes"])


def test_decode_takes_one_list_of_ids_as_one_text():
    import torch

    tok = build_tokenizer("byte", num_sentinels=0)
    ids = tok.encode("hi there")
    assert tok.decode(ids) == "hi there" == tok.decode([ids])[0] == tok.decode(torch.tensor(ids))
    assert tok.decode([]) == []
