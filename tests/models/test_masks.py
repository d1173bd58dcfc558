"""Attention masks as Hugging Face passes them (0/1 integers), as floats or as booleans: one result."""

import pytest
import torch

import encdec
from encdec.errors import DataError
from encdec.models import build_model, preset

V = 61


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

SEQ2SEQ = {  # name -> (preset, overrides): families whose source is padded on the right
    "t5": ("t5-tiny", {}),
    "rot5-prepended": ("rot5-tiny", dict(rope_cross="prepended")),
    "transformer": ("transformer-tiny", {}),
    "rnn_seq2seq": ("rnn_seq2seq-tiny", {}),
}
CAUSAL = {  # families whose prompts are padded on the left
    "decoder_only": ("decoder_only-tiny", {}),
    "ar_encdec": ("ar_encdec-tiny", dict(research=dict(add_pos_embed_to_decoder=True, sub_pos_embed="YES_LN"))),
    "parallel_encdec": ("parallel_encdec-tiny", {}),
}
DTYPES = [torch.long, torch.int, torch.float]


def tiny(name: str):
    preset_name, overrides = {**SEQ2SEQ, **CAUSAL}[name]
    torch.manual_seed(0)
    cfg = preset(preset_name, vocab_size=V, pad_id=V - 2, eos_id=V - 1, decoder_start_id=0, dropout=0.0, **overrides)
    return build_model(cfg).eval()


def batch(left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids (3, 6) of lengths 6, 4 and 2, padded on the right or the left, and their bool mask."""
    lengths = torch.tensor([6, 4, 2])
    columns = torch.arange(6)[None, :]
    mask = columns >= 6 - lengths[:, None] if left else columns < lengths[:, None]
    ids = torch.randint(0, V - 2, (3, 6), generator=torch.Generator().manual_seed(1))
    return ids.masked_fill(~mask, V - 2), mask


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_integer_float_and_bool_source_masks_give_identical_logits(name):
    model = tiny(name)
    src, mask = batch(left=False)
    tgt = torch.randint(0, V - 2, (3, 5))
    with torch.no_grad():
        expected = model(src, tgt, src_mask=mask).logits
        assert not torch.equal(expected, model(src, tgt).logits)  # the mask matters
        for dtype in DTYPES:
            assert torch.equal(model(src, tgt, src_mask=mask.to(dtype)).logits, expected), dtype


@pytest.mark.parametrize("name", CAUSAL)
def test_integer_float_and_bool_prompt_masks_give_identical_logits(name):
    model = tiny(name)
    ids, mask = batch(left=True)
    start = torch.zeros(ids.shape[0], 1, dtype=torch.long)  # generate's placeholder: the prompt's last logits

    def first_logits(mask):
        return model.step(start, model.start(ids, mask, 4))

    expected = first_logits(mask)
    for dtype in DTYPES:
        assert torch.equal(first_logits(mask.to(dtype)), expected), dtype
        with torch.no_grad():  # forward ignores src_mask, whatever its type
            model(ids, ids, src_mask=mask.to(dtype))


@pytest.mark.parametrize("name", ["t5", "rnn_seq2seq", "decoder_only"])
def test_encode_start_and_generate_take_integer_and_float_masks(name):
    model = tiny(name)
    src, mask = batch(left=name in CAUSAL)
    expected = encdec.generate(model, src, mask, max_new_tokens=5, num_beams=2)
    for dtype in DTYPES:
        assert torch.equal(encdec.generate(model, src, mask.to(dtype), max_new_tokens=5, num_beams=2), expected)
    if name == "t5":
        memory = model.encode(src, mask.long())
        assert memory.mask.dtype == torch.bool and torch.equal(memory.mask, mask)


@pytest.mark.parametrize("name", ["t5", "rnn_seq2seq", "decoder_only"])
def test_an_additive_float_mask_is_refused_in_one_sentence(name):
    model = tiny(name)
    src, mask = batch(left=name in CAUSAL)
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    with pytest.raises(DataError, match="must hold only 0 and 1"):
        model.start(src, additive, 4)
    with pytest.raises(DataError, match="must hold only 0 and 1"):
        encdec.generate(model, src, additive)
    if name not in CAUSAL:
        with pytest.raises(DataError, match="must hold only 0 and 1"):
            model(src, src, src_mask=additive)


def test_t5_with_a_tokenizers_long_mask_equals_hugging_face(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0
    )
    reference = transformers.T5ForConditionalGeneration(config).eval()
    reference.save_pretrained(tmp_path)
    ours = encdec.load_hf(tmp_path)
    src = torch.randint(2, 99, (3, 12))
    attention_mask = torch.ones(3, 12, dtype=torch.long)  # as a tokenizer returns it
    attention_mask[1, 8:] = 0
    attention_mask[2, 3:] = 0
    tgt = torch.randint(2, 99, (3, 7))
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=attention_mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=attention_mask).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
