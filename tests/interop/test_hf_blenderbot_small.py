"""BlenderbotSmall (model_type blenderbot-small, interop/blenderbot_small/): our model equals transformers' on the
same tiny random weights (logits on a padded batch, greedy and beam tokens), exports back to the same logits, is
counted by `encdec size` as transformers holds it, writes LoRA adapters peft loads under its names, and serves as
it generates (tests/interop/bart_family_kit.py's tests); read post-norm with learned positions from 0 and the
decoder's embedding norm before its positions; its tokenizer, built offline from vocab.json and merges.txt, is
read with the ids its config names."""

import json

import pytest

from encdec.tokenizers import load_tokenizer
from tests.interop.bart_family_kit import BartFamilyTests

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


class TestBlenderbotSmall(BartFamilyTests):
    family, start = "BlenderbotSmall", 1

    def test_read_post_norm_from_position_0_with_the_decoder_s_embedding_norm_first_and_its_ids(self, pair):
        cfg = pair[1].config
        assert cfg.embeddings.norm and cfg.embeddings.decoder_norm_first and cfg.norms.position == "post"
        ids = (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id)
        assert (cfg.positions.kind, cfg.positions.offset, *ids) == ("learned", 0, 0, 2, 1)


def test_its_tokenizer_of_vocab_json_and_merges_txt_encodes_as_transformers_with_its_config_s_ids(tmp_path):
    specials = ["__null__", "__start__", "__end__", "__unk__"]
    pieces = ["h@@", "he@@", "hel@@", "hello", "w@@", "o@@", "r@@", "l@@", "d", "world", ",", "!", "l", "o"]
    (tmp_path / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(specials + pieces)}))
    (tmp_path / "merges.txt").write_text(
        "#version: 0.2\nh e\nhe l\nl o</w>\nhel lo</w>\nw o\nwo r\nwor l\nworl d</w>\n"
    )
    transformers.BlenderbotSmallConfig(vocab_size=32).save_pretrained(tmp_path)
    theirs = transformers.BlenderbotSmallTokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    ours = load_tokenizer(tmp_path)
    texts = ["Hello, world!", "hello hello world", "held word"]  # lower-cased, unknown pieces __unk__
    assert ours.encode(texts) == theirs(texts, add_special_tokens=False)["input_ids"]
    assert (ours.pad_id, ours.bos_id, ours.eos_id, ours.decoder_start_id) == (0, 1, 2, 1)
