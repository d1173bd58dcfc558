import json

import numpy as np
import pytest

from encdec.data.corpora import PairTemplate, iter_parallel
from encdec.data.shards import MANIFEST, choose_dtype, prepare_shards, read_shards
from encdec.errors import DataError
from encdec.tokenizers import build_tokenizer


@pytest.fixture(scope="module")
def mistral_tok(mistral_model):
    return build_tokenizer("sentencepiece", mistral_model)


@pytest.fixture(scope="module")
def tinystories_shards(tmp_path_factory, mistral_tok, tinystories_path):
    out = tmp_path_factory.mktemp("shards") / "tinystories"
    return prepare_shards(
        out, mistral_tok, "tinystories", [tinystories_path], val_fraction=0.1, workers=2, progress=False
    )


def test_tinystories_shards_decode_to_the_original_stories(tinystories_shards, tinystories_stories):
    train, validation = read_shards(tinystories_shards, "train"), read_shards(tinystories_shards, "validation")
    tokenizer = train.tokenizer()
    decoded = {}
    for shard in (train, validation):
        documents = shard.fields["text"]
        assert documents.tokens.dtype == np.uint16
        assert all(documents[i][-1] == tokenizer.eos_id for i in range(len(documents)))
        decoded[shard.split] = tokenizer.decode(documents.to_lists())
    assert len(decoded["validation"]) > 100
    assert sorted(decoded["train"] + decoded["validation"]) == sorted(tinystories_stories)
    train_order = [s for s in tinystories_stories if s in set(decoded["train"])]
    assert decoded["train"] == train_order  # documents keep corpus order within a split


def test_manifest_names_tokenizer_sources_and_checksums(tinystories_shards, tinystories_path, mistral_tok):
    manifest = json.loads((tinystories_shards / MANIFEST).read_text())
    inputs = manifest["inputs"]
    assert inputs["tokenizer"]["kind"] == "sentencepiece" and inputs["tokenizer"]["vocab_size"] == 32502
    assert inputs["tokenizer"]["fingerprint"] == mistral_tok.fingerprint()
    [source] = inputs["sources"]
    assert source["path"].endswith("tinystories_train_head.txt.gz")
    assert source["sha256"] == "132ff4de4b33985cd39f5b96f4234250da34f5ea0b43f2f666f38f37bc6cf46e"
    assert (
        manifest["splits"]["train"]["text"]["documents"] + manifest["splits"]["validation"]["text"]["documents"] == 2316
    )


def test_multi30k_pairs_shard_and_decode_back(tmp_path, mistral_tok, shared_data):
    root = shared_data / "translation" / "multi30k"
    paths = [root / "val.en.gz", root / "val.de.gz"]
    out = prepare_shards(tmp_path / "m30k", mistral_tok, "parallel", paths, workers=1, progress=False)
    shard = read_shards(out)
    pairs = list(iter_parallel(*paths))
    assert mistral_tok.decode(shard.fields["source"].to_lists()) == [en for en, _ in pairs]
    assert mistral_tok.decode(shard.fields["target"].to_lists()) == [de for _, de in pairs]


def test_rerun_with_unchanged_inputs_reuses_shards_and_changed_inputs_rebuild(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one story<|endoftext|>\ntwo story\n")
    tokenizer = build_tokenizer("byte")
    out = prepare_shards(tmp_path / "s", tokenizer, "tinystories", [corpus], workers=1, progress=False)
    stamp = (out / "train.text.bin").stat().st_mtime_ns
    prepare_shards(tmp_path / "s", tokenizer, "tinystories", [corpus], workers=1, progress=False)
    assert (out / "train.text.bin").stat().st_mtime_ns == stamp
    corpus.write_text("one story<|endoftext|>\ntwo stories\n")
    prepare_shards(tmp_path / "s", tokenizer, "tinystories", [corpus], workers=1, progress=False)
    assert tokenizer.decode(read_shards(out).fields["text"].to_lists()) == ["one story", "two stories"]


def test_pair_template_is_applied_before_tokenizing(tmp_path):
    corpus = tmp_path / "pairs.jsonl"
    corpus.write_text(json.dumps({"dialogue": "A: hi", "summary": "A greets."}) + "\n")
    tokenizer = build_tokenizer("byte")
    template = PairTemplate("{source}\nSummary:", "{target}")
    out = prepare_shards(
        tmp_path / "s", tokenizer, "jsonl-pairs", [corpus], template=template, workers=1, progress=False
    )
    shard = read_shards(out)
    assert tokenizer.decode(shard.fields["source"].to_lists()) == ["A: hi\nSummary:"]
    assert tokenizer.decode(shard.fields["target"].to_lists()) == ["A greets."]


def test_vocabulary_too_large_for_uint16_shards_is_a_data_error(tmp_path):
    assert choose_dtype(65_536) == "uint16" and choose_dtype(65_537) == "uint32"
    with pytest.raises(DataError, match=r"100000 ids do not fit uint16 shards in .*big"):
        choose_dtype(100_000, "uint16", tmp_path / "big")


def test_shards_of_a_large_vocabulary_are_uint32(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n")
    tokenizer = build_tokenizer("byte", num_sentinels=70_000)
    out = prepare_shards(tmp_path / "s", tokenizer, "text", [corpus], workers=1, progress=False)
    documents = read_shards(out).fields["text"]
    assert documents.tokens.dtype == np.uint32 and documents[0][-1] == tokenizer.eos_id


def test_reading_a_directory_without_shards_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="has no manifest.json"):
        read_shards(tmp_path)


def test_bad_bytes_stop_a_two_worker_preparation_with_the_file_and_line(tmp_path):
    corpus = tmp_path / "stories.txt"
    corpus.write_bytes(b"fine story\n<|endoftext|>\ncaf\xe9 story\n")
    with pytest.raises(DataError, match=r"stories\.txt line 3 is not valid UTF-8"):
        prepare_shards(tmp_path / "s", build_tokenizer("byte"), "tinystories", [corpus], workers=2, progress=False)
    assert not (tmp_path / "s" / MANIFEST).exists()
