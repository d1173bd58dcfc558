"""The RNN seq2seq baseline (seed 002): GRU or LSTM, with and without attention."""

import pytest
import torch
from lm_checks import V, full_logits, tiny

import encdec

VARIANTS = [
    dict(rnn_cell="gru"),
    dict(rnn_cell="lstm"),
    dict(rnn_cell="gru", rnn_attention=False),
    dict(rnn_cell="lstm", rnn_attention=False, n_encoder_layers=2),
]


@pytest.mark.parametrize("options", VARIANTS)
def test_stepping_with_the_hidden_state_equals_the_full_forward(options):
    model = tiny("rnn_seq2seq-tiny", **options)
    src, tgt = torch.randint(0, V - 2, (2, 5)), torch.randint(0, V - 2, (2, 8))
    state = model.start(src, None, 8, beams=2)
    state.reorder(torch.tensor([1, 0, 3, 2]))
    rows = tgt.repeat_interleave(2, dim=0)
    got = torch.cat([model.step(rows[:, :3], state)] + [model.step(rows[:, t : t + 1], state) for t in range(3, 8)], 1)
    expected = full_logits(model, rows, src.repeat_interleave(2, dim=0))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", VARIANTS[:3])
def test_generate_greedy_equals_argmax_over_the_full_forward(options):
    model = tiny("rnn_seq2seq-tiny", **options)
    src = torch.randint(0, V - 2, (2, 5))
    out = encdec.generate(model, src, max_new_tokens=6, eos_token_id=[])
    seq = torch.zeros(2, 1, dtype=torch.long)  # decoder_start_id 0
    for _ in range(6):
        seq = torch.cat((seq, full_logits(model, seq, src)[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, seq)


def test_padding_does_not_change_an_example():
    model = tiny("rnn_seq2seq-tiny")
    src, tgt = torch.randint(0, V - 2, (1, 4)), torch.randint(0, V - 2, (1, 5))
    padded = torch.cat((src, torch.full((1, 3), V - 2)), dim=1)
    mask = torch.tensor([[True] * 4 + [False] * 3])
    with torch.no_grad():
        torch.testing.assert_close(model(padded, tgt, src_mask=mask).logits, model(src, tgt).logits)


def test_without_attention_the_source_reaches_the_decoder_only_through_the_last_hidden_state():
    model = tiny("rnn_seq2seq-tiny", rnn_attention=False)
    assert model.attention is None
    src, tgt = torch.randint(0, V - 2, (1, 5)), torch.randint(0, V - 2, (1, 4))
    with torch.no_grad():
        _, hidden = model.encode(src)
        logits, _ = model.decode(tgt, hidden, None, None)
    torch.testing.assert_close(model(src, tgt).logits, logits)


def test_causal_lm_batches_train_the_decoder_alone():
    model = tiny("rnn_seq2seq-tiny").train()
    ids, labels = torch.randint(0, V, (2, 6)), torch.randint(0, V, (2, 6))
    out = model(None, ids, labels=labels)
    out.loss.backward()
    assert torch.equal(out.loss, out.ce_loss)
    assert all(p.grad is None for p in model.encoder.parameters())
