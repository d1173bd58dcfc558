"""Recorded attention equals Hugging Face's `output_attentions=True` on the same weights: a T5 (and the
Transformer layouts) built from a config, exported with export_hf and loaded by transformers."""

import pytest
import torch

import encdec
from encdec.inspection import record_attention
from encdec.inspection.record import teacher_forced
from encdec.interop import export_hf
from encdec.tokenizers import build_tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

MODELS = {  # name -> (preset, overrides): position schemes T5's relative bias, sinusoidal, learned
    "t5-v1.0": ("t5-tiny", {}),
    "t5-v1.1": ("t5-v1.1-tiny", {"n_decoder_layers": 3}),
    "transformer-as-marian": ("transformer-tiny", {}),
    "bart": ("transformer-tiny", {"position": "learned", "position_offset": 2, "embedding_norm": True}),
}


def exported(name: str, path):
    """Our model of `name` with random weights, and transformers' reading of its export (eager attention)."""
    tokenizer = build_tokenizer("byte", num_sentinels=4)
    preset, overrides = MODELS[name]
    ids = dict(pad_id=tokenizer.pad_id, eos_id=tokenizer.eos_id, decoder_start_id=tokenizer.decoder_start_id)
    torch.manual_seed(0)
    ours = encdec.build_model(encdec.preset(preset, vocab_size=tokenizer.vocab_size, **ids, **overrides)).eval()
    export_hf(ours, tokenizer, path)
    reference = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager").eval()
    return ours, reference


@pytest.mark.parametrize("name", MODELS)
def test_cross_and_encoder_attention_equal_hugging_face(tmp_path, name):
    ours, reference = exported(name, tmp_path)
    generator = torch.Generator().manual_seed(2)
    src = torch.randint(5, 250, (3, 14), generator=generator)
    mask = torch.ones(3, 14, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 3:] = 0
    tgt = torch.randint(5, 250, (3, 8), generator=generator)
    record = record_attention(ours, src, tgt, mask)
    with torch.no_grad():
        out = reference(
            input_ids=src,
            attention_mask=mask,
            decoder_input_ids=teacher_forced(tgt, ours.config.decoder_start_id),
            output_attentions=True,
        )
    expected_cross = torch.stack(out.cross_attentions, dim=1)  # (B, L_dec, H, T, S)
    expected_encoder = torch.stack(out.encoder_attentions, dim=1)  # (B, L_enc, H, S, S)
    assert record.cross.shape == expected_cross.shape and record.encoder.shape == expected_encoder.shape
    assert (record.cross - expected_cross).abs().max() < 1e-5
    assert (record.encoder - expected_encoder).abs().max() < 1e-5
