"""The one loss (encdec.models.loss): every family returns its terms unweighted; one function weighs them."""

import pytest
import torch
import torch.nn.functional as F

from encdec.models import build_model, preset
from encdec.models.loss import chunked_loss, compute_loss, cross_entropy, loss_weights

V = 64
FAMILIES = ["t5-tiny", "ar_encdec-tiny", "parallel_encdec-tiny", "decoder_only-tiny", "rnn_seq2seq-tiny"]


def build(name: str, **overrides):
    torch.manual_seed(0)
    return build_model(preset(name, vocab_size=V, pad_id=0, eos_id=1, decoder_start_id=0, dropout=0.0, **overrides))


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_returns_its_loss_as_the_one_loss_function_computes_it(name):
    model = build(name, **({"n_experts": 2} if name != "rnn_seq2seq-tiny" else {})).train()
    ids, labels = torch.randint(2, V, (2, 7)), torch.randint(2, V, (2, 7))
    labels[0, -2:] = -100
    out = model(ids, ids, labels=labels)
    expected = compute_loss(out.logits, labels, out.aux_losses, model.config)
    torch.testing.assert_close(out.loss, expected.total)
    torch.testing.assert_close(out.ce_loss, F.cross_entropy(out.logits.flatten(0, 1), labels.flatten()))
    without_labels = model(ids, ids)
    assert without_labels.loss is None and set(without_labels.aux_losses) == set(out.aux_losses)


def test_every_auxiliary_term_a_family_returns_has_a_declared_weight():
    for name in FAMILIES[:4]:
        model = build(name, n_experts=2).train()
        ids = torch.randint(2, V, (2, 7))
        terms = model(ids, ids).aux_losses
        assert terms and set(terms) <= set(loss_weights(model.config))


def test_weights_come_from_the_config_and_smoothing_changes_only_the_optimised_term():
    model = build("ar_encdec-tiny", n_experts=2, aux_loss_coef=0.5, z_loss_coef=0.25).train()
    ids, labels = torch.randint(2, V, (2, 7)), torch.randint(2, V, (2, 7))
    out = model(ids, ids)
    t = out.aux_losses
    loss = compute_loss(out.logits, labels, t, model.config, label_smoothing=0.1)
    coeff = model.config.research.embedding_loss_coeff
    expected_aux = (
        coeff * t["embedding_loss"]
        + 0.5 * (t["moe_aux_encoder"] + t["moe_aux_decoder"])
        + 0.25 * (t["moe_z_encoder"] + t["moe_z_decoder"])
    )
    torch.testing.assert_close(loss.aux, expected_aux)
    torch.testing.assert_close(loss.ce, cross_entropy(out.logits, labels))
    torch.testing.assert_close(loss.objective, cross_entropy(out.logits, labels, 0.1))
    torch.testing.assert_close(loss.total, loss.objective + loss.aux)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("overrides", [{}, {"n_experts": 2}, {"tie_embeddings": False}, {"logit_softcap": 5.0}])
@pytest.mark.parametrize("linear", [True, False])
def test_the_chunked_loss_equals_the_loss_of_the_whole_logits_and_so_do_its_gradients(smoothing, overrides, linear):
    """Blocks of 3 rows (the last one short): a head of one product with its gradients formed in the forward pass
    (linear), or any head's block made again in the backward pass; the terms and every gradient within 1e-5 of
    the whole logits' (fp32). A capped head is no product alone."""
    whole, chunked = build("t5-tiny", **overrides).train(), build("t5-tiny", **overrides).train()
    head = chunked.linear_head() if linear else chunked.head
    if "logit_softcap" in overrides and linear:
        assert head is None
        return
    src, tgt, labels = torch.randint(2, V, (2, 9)), torch.randint(2, V, (2, 7)), torch.randint(2, V, (2, 7))
    labels[0, -3:] = -100
    out = whole(src, tgt)
    expected = compute_loss(out.logits, labels, out.aux_losses, whole.config, smoothing)
    hidden, aux = chunked.features(src, tgt, None, None)
    got = chunked_loss(hidden, head, labels, aux, chunked.config, smoothing, chunk=3 * V)
    for name in ("ce", "objective", "aux"):
        torch.testing.assert_close(getattr(got, name), getattr(expected, name), rtol=1e-5, atol=1e-5)
    expected.total.backward()
    got.total.backward()
    for (name, a), b in zip(whole.named_parameters(), chunked.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


def test_the_decoder_only_baseline_gives_its_hidden_states_and_head_apart_as_the_chunked_loss_takes_them():
    whole, chunked = build("decoder_only-tiny").train(), build("decoder_only-tiny").train()
    tgt, labels = torch.randint(2, V, (2, 9)), torch.randint(2, V, (2, 9))
    out = whole(None, tgt)
    expected = compute_loss(out.logits, labels, out.aux_losses, whole.config)
    hidden, aux = chunked.features(None, tgt, None, None)
    assert chunked.linear_head() is not None  # tied, uncapped: one product
    got = chunked_loss(hidden, chunked.linear_head(), labels, aux, chunked.config, chunk=4 * V)
    torch.testing.assert_close(got.total, expected.total, rtol=1e-5, atol=1e-5)
    expected.total.backward()
    got.total.backward()
    for a, b in zip(whole.parameters(), chunked.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5)
