"""PLBart (model_type plbart, interop/plbart/): our model equals transformers' on the same tiny random weights
(logits on a padded batch, greedy and beam tokens), exports back as PLBart with the same logits, is counted by
`encdec size` as transformers holds it, writes LoRA adapters peft loads under its names, and serves as it
generates (tests/interop/bart_family_kit.py's tests); read as BART's layout with scaled embeddings, named PLBart; and its own
tokenizer's language codes are placed as the tokenizer places them."""

import pytest
import torch

from encdec.tokenizers.languages import encode_in
from tests.conftest import SHARED_DATA
from tests.interop.bart_family_kit import BartFamilyTests

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


class TestPLBart(BartFamilyTests):
    family, start = "PLBart", 0  # PLBart starts the decoder at BOS, 0

    def test_read_as_bart_s_layout_with_scaled_embeddings_and_its_ids(self, pair):
        cfg = pair[1].config
        layout = (
            cfg.positions.kind,
            cfg.positions.offset,
            cfg.norms.position,
            cfg.embeddings.norm,
            cfg.embeddings.scale,
        )
        assert layout == ("learned", 2, "post", True, True) and cfg.hf_model_type == "plbart"
        assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id) == (1, 2, 0)


@pytest.mark.parametrize("code", ["__python__", "__java__", "__en_XX__"])
def test_a_language_code_is_placed_as_plbart_s_tokenizer_places_it(code):
    """PLBart's own tokenizer, built offline over a shared SentencePiece model: encdec places a code (its whole
    token; the tokenizer's shorthand `python` is not read) after EOS, as the tokenizer does with src_lang set."""
    model_file = str(SHARED_DATA / "tokenizers/mistral_tokenizer.model.v1")
    ours = transformers.PLBartTokenizer(model_file, src_lang="__en_XX__")
    theirs = transformers.PLBartTokenizer(model_file, src_lang=code)
    texts = ["def add(a, b): return a + b", "print x"]
    expected = theirs(texts, return_tensors="pt", padding=True)["input_ids"]
    assert torch.equal(encode_in(ours, texts, code)["input_ids"], expected)
    assert theirs.suffix_tokens == [2, theirs.convert_tokens_to_ids(code)]
