import pytest

from encdec.errors import DataError

tiktoken = pytest.importorskip("tiktoken")

from encdec.tokenizers.tiktoken import TiktokenTokenizer  # noqa: E402


def byte_encoding():
    """A real tiktoken Encoding over the 256 bytes plus <|endoftext|>, buildable offline."""
    ranks = {bytes([b]): b for b in range(256)}
    return tiktoken.Encoding(
        name="bytes_test",
        pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 256},
    )


def test_gpt2_without_cache_or_network_is_a_data_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("no_proxy", "")
    monkeypatch.setattr("tiktoken.load.read_file", _refuse_download)
    with pytest.raises(DataError, match="'gpt2' cannot be loaded"):
        TiktokenTokenizer("gpt2")


def _refuse_download(blobpath):
    raise ConnectionError(f"no network for {blobpath}")


def test_specials_follow_the_encoding_and_end_of_text_is_bos_and_eos():
    tokenizer = TiktokenTokenizer("bytes_test", num_sentinels=4, encoding=byte_encoding())
    assert tokenizer.eos_id == tokenizer.bos_id == 256
    assert tokenizer.pad_id == 257 and tokenizer.sentinel_ids == [258, 259, 260, 261]
    assert tokenizer.decoder_start_id == 262 and tokenizer.vocab_size == 263


def test_tiktoken_round_trips_and_skips_appended_specials():
    tokenizer = TiktokenTokenizer("bytes_test", num_sentinels=4, encoding=byte_encoding())
    texts = ["Once upon a time <|endoftext|> there", "ünïcode"]
    encoded = tokenizer.encode(texts, add_eos=True)
    assert encoded[0][-1] == tokenizer.eos_id
    assert tokenizer.decode(encoded) == texts
    row = encoded[1][:2] + [tokenizer.sentinel_ids[1]]
    assert tokenizer.decode([row], skip_special=False) == ["ü[MASK-1]"]
