"""Our Marian, Pegasus, BART and mBART equal Hugging Face's on the same random weights: logits and generate()."""

import pytest
import torch

import encdec
from tests.interop import parity_kit

transformers = pytest.importorskip("transformers")

SHAPE = parity_kit.BART_SHAPE
MODELS = {
    # Marian: pad doubles as decoder start, EOS 0, SiLU ("swish"), scaled embeddings (opus-mt's settings)
    "marian": lambda: transformers.MarianMTModel(
        transformers.MarianConfig(
            vocab_size=101,
            pad_token_id=100,
            decoder_start_token_id=100,
            eos_token_id=0,
            forced_eos_token_id=0,
            activation_function="swish",
            scale_embedding=True,
            **SHAPE,
        )
    ),
    "marian-gelu": lambda: transformers.MarianMTModel(
        transformers.MarianConfig(vocab_size=101, pad_token_id=100, decoder_start_token_id=100, eos_token_id=0, **SHAPE)
    ),
    # Pegasus: Marian's positions, pre-norm with a LayerNorm closing each stack
    "pegasus": lambda: transformers.PegasusForConditionalGeneration(
        transformers.PegasusConfig(vocab_size=103, scale_embedding=True, activation_function="relu", **SHAPE)
    ),
    "bart": lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(vocab_size=99, **SHAPE)),
    # mBART: pre-norm with a LayerNorm closing each stack, scaled embeddings
    "mbart": lambda: transformers.MBartForConditionalGeneration(
        transformers.MBartConfig(vocab_size=99, scale_embedding=True, **SHAPE)
    ),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


def pair(name: str, path):
    torch.manual_seed(0)
    reference = MODELS[name]().eval()
    with torch.no_grad():  # HF initialises these to zero; random values test that they are carried over
        reference.final_logits_bias.normal_(0, 0.5)
        for module in reference.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.1)
                module.bias.normal_(0, 0.1)
    reference.save_pretrained(path)
    return reference, encdec.load_hf(path)


def padded_batch(reference):
    vocab, pad = reference.config.vocab_size, reference.config.pad_token_id
    src = torch.randint(3, vocab - 1, (4, 30))
    mask = torch.ones(4, 30, dtype=torch.long)
    mask[1, 20:] = 0
    mask[2, 4:] = 0
    return src.masked_fill(mask == 0, pad), mask


@pytest.mark.parametrize("name", MODELS)
def test_logits_equal_hugging_face_on_a_padded_batch(tmp_path, name):
    reference, ours = pair(name, tmp_path)
    src, mask = padded_batch(reference)
    tgt = torch.randint(3, reference.config.vocab_size - 1, (4, 25))
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=mask.bool()).logits
    assert (got - expected).abs().max().item() < 1e-4


@pytest.mark.parametrize("name", ["marian", "bart", "mbart"])
@pytest.mark.parametrize(
    "options",
    [dict(), dict(num_beams=4, length_penalty=0.8, no_repeat_ngram_size=3, num_return_sequences=2)],
    ids=["greedy", "beam"],
)
def test_generate_equals_hugging_face_token_for_token(tmp_path, name, options):
    reference, ours = pair(name, tmp_path)
    src, mask = padded_batch(reference)
    options = dict(options, max_new_tokens=12)
    expected = reference.generate(input_ids=src, attention_mask=mask, **options)
    got = encdec.generate(ours, src, mask, **options)
    assert torch.equal(got, expected)
    if "forced_eos_token_id" in ours.generation_defaults:  # forced EOS at the length limit, as HF
        assert (got[:, -1] == reference.config.eos_token_id).any()


def test_marian_positions_put_sines_first_and_cosines_second(tmp_path):
    reference, ours = pair("marian", tmp_path)
    table = reference.model.encoder.embed_positions.weight
    torch.testing.assert_close(ours.encoder.positions.table[: table.shape[0]], table)


def test_the_checkpoints_generation_settings_become_defaults(tmp_path):
    _, ours = pair("bart", tmp_path)
    assert ours.generation_defaults["forced_eos_token_id"] == 2
    assert ours.config.positions.offset == 2 and ours.config.embeddings.norm
