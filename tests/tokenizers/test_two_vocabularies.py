"""A Hugging Face tokenizer of two vocabularies (FSMT's: sources encoded by vocab-src.json, outputs decoded by
vocab-tgt.json) read from its directory: its end of sentence is the separator it closes every text with (it names
no EOS), and the one text generator encodes by the source table and decodes by the target one."""

import json

import pytest
import torch
from hf_kit import two_vocabulary_tokenizer

from encdec.generation.text_generator import TextGenerator
from encdec.tokenizers.pretrained import PretrainedTokenizer

pytest.importorskip("transformers")
pytest.importorskip("sacremoses")  # FSMT's tokenizer runs Moses
TEXTS = ["the cat sat", "a hat"]


def test_the_end_of_sentence_is_the_separator_every_text_closes_with(tmp_path):
    theirs = two_vocabulary_tokenizer(tmp_path)
    ours = PretrainedTokenizer.from_directory(tmp_path)
    assert theirs.eos_token_id is None and ours.eos_id == theirs.sep_token_id == 2 and ours.pad_id == 1
    assert ours.encode("the cat")[-1] != 2 and theirs("the cat")["input_ids"][-1] == 2  # encdec adds it itself


def test_sources_encode_by_the_source_table_and_outputs_decode_by_the_target_one(tmp_path):
    theirs = two_vocabulary_tokenizer(tmp_path)
    generator = TextGenerator(PretrainedTokenizer.from_directory(tmp_path).hf)
    encoded = generator.encode(TEXTS)
    source, target = (json.loads((tmp_path / f"vocab-{side}.json").read_text()) for side in ("src", "tgt"))
    assert encoded["input_ids"][0].tolist() == [source[p] for p in ("the</w>", "c", "at</w>", "s", "at</w>", "</s>")]
    assert encoded["attention_mask"][1].tolist() == [1, 1, 1, 1, 0, 0]
    rows = torch.tensor([[2, *(target[p] for p in ("the</w>", "c", "at</w>")), 2], [2, target["a</w>"], 2, 1, 1]])
    assert generator.decode(rows) == ["the cat", "a"]
    assert (
        theirs.batch_decode(encoded["input_ids"], skip_special_tokens=True) != TEXTS
    )  # the source ids by the wrong table
