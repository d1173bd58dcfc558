"""Speculative greedy decoding equals plain greedy on models read from Hugging Face directories: Marian, BART,
T5 and T5Gemma (a draft of one decoder layer beside a target of more)."""

import pytest
import torch

import encdec
from tests.interop.parity_kit import BART_SHAPE
from tests.interop.test_hf_t5gemma import WIDER_ENCODER, hf_model

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")


def marian(decoder_layers: int):
    keys = dict(BART_SHAPE, decoder_layers=decoder_layers)
    return transformers.MarianMTModel(
        transformers.MarianConfig(vocab_size=101, pad_token_id=100, decoder_start_token_id=100, eos_token_id=0, **keys)
    )


def bart(decoder_layers: int):
    keys = dict(BART_SHAPE, decoder_layers=decoder_layers)
    return transformers.BartForConditionalGeneration(transformers.BartConfig(vocab_size=99, **keys))


def t5(decoder_layers: int):
    config = transformers.T5Config(
        vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_decoder_layers=decoder_layers, num_heads=4
    )
    config.decoder_start_token_id = 0
    return transformers.T5ForConditionalGeneration(config)


def t5gemma(decoder_layers: int):
    return hf_model(encoder=WIDER_ENCODER, num_hidden_layers=decoder_layers)


@pytest.mark.parametrize("build", [marian, bart, t5, t5gemma])
def test_speculative_greedy_of_a_hugging_face_model_equals_its_plain_greedy(build, tmp_path):
    models = []
    for seed, layers in ((0, 2), (1, 1)):  # the target, then its draft
        torch.manual_seed(seed)
        build(layers).save_pretrained(tmp_path / str(seed))
        models.append(encdec.load_hf(tmp_path / str(seed)))
    target, draft = models
    vocab = target.config.vocab_size
    torch.manual_seed(2)
    src = torch.randint(3, vocab - 2, (3, 9))
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[1, 6:] = mask[2, 3:] = False
    plain = target.generate(src, mask, max_new_tokens=16)
    for shares in (True, False):
        got = target.generate(src, mask, max_new_tokens=16, assistant_model=draft, assistant_shares_encoder=shares)
        assert torch.equal(got, plain)
