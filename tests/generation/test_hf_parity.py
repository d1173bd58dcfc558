"""encdec.generate equals Hugging Face's generate() token for token on random-weight T5 models.

CPU only, whatever --device says: token-for-token parity holds where both libraries
sum in the same order, and the reference runs on the CPU. tests/generation/
test_device.py and test_invariants.py cover the device under test.
"""

import pytest
import torch

import encdec

transformers = pytest.importorskip("transformers")

PARITY_OPTIONS = {
    "greedy": dict(),
    "beam": dict(num_beams=4, length_penalty=0.6, no_repeat_ngram_size=3),
    "beam-long-early": dict(
        num_beams=4, length_penalty=2.0, no_repeat_ngram_size=3, early_stopping=True, num_return_sequences=2
    ),
    "beam-never": dict(num_beams=3, length_penalty=1.5, early_stopping="never"),
    "greedy-penalties": dict(repetition_penalty=1.3, min_new_tokens=5, no_repeat_ngram_size=2),
}


@pytest.fixture(scope="module")
def t5_pair(tmp_path_factory):
    """A random-weight HF T5 (HF's own test shape) and the same weights loaded into encdec."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0
    )
    reference = transformers.T5ForConditionalGeneration(config).eval()
    path = tmp_path_factory.mktemp("t5")
    reference.save_pretrained(path)
    return reference, encdec.load_hf(path)


def padded_batch(vocab: int, pad: int = 0):
    src = torch.randint(2, vocab, (4, 20))
    mask = torch.ones(4, 20, dtype=torch.long)
    mask[1, 12:] = 0
    mask[2, 3:] = 0
    return src.masked_fill(mask == 0, pad), mask


def eos_that_ends_rows_early(reference, src, mask, options) -> int:
    """Random weights rarely pick the real EOS; use a token the search emits early so rows end at different steps."""
    return int(reference.generate(input_ids=src, attention_mask=mask, **options, max_new_tokens=6)[0, -1])


@pytest.mark.parametrize("options", PARITY_OPTIONS.values(), ids=PARITY_OPTIONS.keys())
@pytest.mark.parametrize("eos", ["model", "early"])
def test_generate_equals_hugging_face_on_a_padded_batch(t5_pair, options, eos):
    reference, ours = t5_pair
    torch.manual_seed(1)
    src, mask = padded_batch(99)
    eos_id = 1 if eos == "model" else eos_that_ends_rows_early(reference, src, mask, options)
    options = dict(options, max_new_tokens=15, eos_token_id=eos_id)
    expected = reference.generate(input_ids=src, attention_mask=mask, **options)
    got = encdec.generate(ours, src, mask, **options)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)
    if eos == "early" and options.get("early_stopping") != "never":  # "never" with lp > 1 favours long beams
        assert (got[:, 1:] == eos_id).any(), "the test should exercise EOS"


def test_seeded_sampling_is_reproducible_on_a_loaded_checkpoint(t5_pair):
    _, ours = t5_pair
    src, mask = padded_batch(99)
    options = dict(do_sample=True, top_k=10, top_p=0.95, max_new_tokens=10, seed=3)
    assert torch.equal(encdec.generate(ours, src, mask, **options), encdec.generate(ours, src, mask, **options))


def test_without_a_mask_pad_tokens_are_padding_as_in_hugging_face(t5_pair):
    reference, ours = t5_pair
    src, mask = padded_batch(99)
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=8)
    assert torch.equal(encdec.generate(ours, src, max_new_tokens=8), expected)
