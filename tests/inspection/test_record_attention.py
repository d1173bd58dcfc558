"""Recorded attention is the forward pass's own: rows are distributions, padding gets nothing, T5's equals
Hugging Face's, ROT5's equals a recomputation from its projections with RoPE, and recording changes no
logit and costs nothing when off."""

import pytest
import torch

import encdec
import encdec.modules.attention as attention_module
from encdec.errors import ConfigError, DataError
from encdec.inspection import record_attention
from encdec.inspection.record import recording, teacher_forced
from encdec.modules import Attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

FAMILIES = {  # name -> (preset, overrides)
    "t5": ("t5-tiny", {}),
    "rot5-gqa": ("rot5-tiny", {}),  # 4 heads, 2 KV heads, RoPE in self- and cross-attention
    "rot5-prepended": ("rot5-tiny", {"rope_cross": "prepended"}),
    "transformer": ("transformer-tiny", {}),
    "t5-cross-heads": ("t5-tiny", {"cross_n_heads": 2, "n_decoder_layers": 3}),
}


def build(name: str, vocab: int = 90) -> torch.nn.Module:
    preset, overrides = FAMILIES[name]
    torch.manual_seed(0)
    return encdec.build_model(encdec.preset(preset, vocab_size=vocab, dropout=0.0, **overrides)).eval()


def padded_batch(vocab: int = 90):
    """Three sources of 9, 5 and 2 real tokens, right-padded; targets of 6 tokens."""
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(3, vocab, (3, 9), generator=generator)
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 2:] = False
    src[~mask] = 0
    return src, mask, torch.randint(3, vocab, (3, 6), generator=generator)


@pytest.mark.parametrize("name", FAMILIES)
def test_rows_are_distributions_and_padded_source_positions_get_zero(name):
    model = build(name)
    src, mask, tgt = padded_batch()
    record = record_attention(model, src, tgt, mask)
    cfg = model.config
    assert record.cross.shape == (3, cfg.decoder_layers, cfg.cross_attention.n_heads or cfg.n_heads, 6, 9)
    assert record.encoder.shape == (3, cfg.n_encoder_layers, cfg.n_heads, 9, 9)
    for probs in (record.cross, record.encoder):
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]), atol=1e-6, rtol=0)
        assert (probs >= 0).all()
        padded = ~mask[:, None, None, None, :].expand_as(probs)
        assert probs[padded].abs().max() == 0  # exactly: a blocked key's weight underflows to 0
        assert probs[~padded].min() > 0


def test_recording_changes_no_logit_and_leaves_nothing_on():
    for name in FAMILIES:
        model = build(name)
        src, mask, tgt = padded_batch()
        decoder_input = teacher_forced(tgt, model.config.decoder_start_id)
        with torch.no_grad():
            plain = model(src, decoder_input, src_mask=mask).logits
            attns = [m for m in model.modules() if isinstance(m, Attention)]
            with recording(attns) as records:
                recorded = model(src, decoder_input, src_mask=mask).logits
        assert torch.equal(plain, recorded), name
        assert all(len(r) == 1 for r in records)
        assert all(m.recorded is None for m in attns)


def test_recording_off_never_computes_probabilities(monkeypatch):
    """Off, the only cost is the attribute check: the probabilities are never formed, in a pass or a decode."""

    def forbidden(*args, **kwargs):
        raise AssertionError("attention_probs ran with recording off")

    monkeypatch.setattr(attention_module, "attention_probs", forbidden)
    model = build("rot5-gqa")
    src, mask, tgt = padded_batch()
    with torch.no_grad():
        model(src, teacher_forced(tgt, 0), src_mask=mask)
    encdec.generate(model, src, mask, max_new_tokens=4, num_beams=2)
    encdec.generate(model, src, mask, max_new_tokens=4)


def test_a_raising_pass_leaves_no_module_recording():
    model = build("t5")
    attns = [m for m in model.modules() if isinstance(m, Attention)]
    with pytest.raises(RuntimeError), recording(attns):
        raise RuntimeError("stop")
    assert all(m.recorded is None for m in attns)


def test_a_training_model_is_recorded_without_dropout_and_stays_training():
    torch.manual_seed(0)
    model = encdec.build_model(encdec.preset("rot5-tiny", vocab_size=90, dropout=0.5)).train()
    src, mask, tgt = padded_batch()
    first = record_attention(model, src, tgt, mask)
    second = record_attention(model, src, tgt, mask)
    assert model.training
    assert torch.equal(first.cross, second.cross)


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """RoPE with rotate-half pairing (dimension i with i + D/2), written out: x (B, H, N, D), positions (N,)."""
    D = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = positions.double()[:, None] * inv_freq[None, :]  # (N, D/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # (N, D)
    first, second = x.double()[..., : D // 2], x.double()[..., D // 2 :]
    return x.double() * cos + torch.cat([-second, first], -1) * sin


def direct_probs(attn: Attention, h: torch.Tensor, source: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax over (q_i rotated by i) . (k_j rotated by j) * scale, KV heads repeated for GQA, padded keys
    dropped: h (B, T, C) the layer's normed input, source (B, S, C), mask (B, S) -> (B, H, T, S) in float64."""
    B, T, _ = h.shape
    S = source.shape[1]
    H, K, D = attn.n_heads, attn.n_kv_heads, attn.d_head
    q = rotate(attn.q(h).view(B, T, H, D).transpose(1, 2), torch.arange(T))
    k = rotate(attn.k(source).view(B, S, K, D).transpose(1, 2), torch.arange(S))
    k = k.repeat_interleave(H // K, dim=1)  # query head h reads KV head h // (H / K)
    scale = D**-0.5 if attn.scale is None else attn.scale
    scores = (q @ k.transpose(-1, -2)) * scale
    return scores.masked_fill(~mask[:, None, None, :], float("-inf")).softmax(-1)


def test_rot5_gqa_equals_a_recomputation_from_its_projections_with_rope():
    model = build("rot5-gqa")
    assert model.config.n_kv_heads < model.config.n_heads and model.config.cross_attention.rope == "relative"
    src, mask, tgt = padded_batch()
    inputs = {}  # module -> (its normed input, its source) as the pass called it

    def keep(module, args):
        inputs[module] = (args[0], args[1] if len(args) > 1 and args[1] is not None else args[0])

    attns = [b.cross_attn for b in model.decoder.blocks] + [b.self_attn for b in model.encoder.blocks]
    handles = [a.register_forward_pre_hook(keep) for a in attns]
    record = record_attention(model, src, tgt, mask)
    for handle in handles:
        handle.remove()
    with torch.no_grad():
        for layer, block in enumerate(model.decoder.blocks):
            expected = direct_probs(block.cross_attn, *inputs[block.cross_attn], mask)
            torch.testing.assert_close(record.cross[:, layer].double(), expected, atol=1e-5, rtol=0)
        for layer, block in enumerate(model.encoder.blocks):
            expected = direct_probs(block.self_attn, *inputs[block.self_attn], mask)
            torch.testing.assert_close(record.encoder[:, layer].double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["rnn_seq2seq-tiny", "decoder_only-tiny", "ar_encdec-tiny"])
def test_a_family_without_source_attention_is_one_sentence(name):
    model = encdec.build_model(encdec.preset(name, vocab_size=90)).eval()
    src, mask, tgt = padded_batch()
    with pytest.raises(ConfigError, match="attention maps are drawn for transformer encoder-decoders") as info:
        record_attention(model, src, tgt, mask)
    assert "\n" not in str(info.value)


def test_mismatched_batches_are_one_sentence():
    src, mask, tgt = padded_batch()
    with pytest.raises(DataError, match="same batch size"):
        record_attention(build("t5"), src, tgt[:2], mask)
