"""The parallel encoder-decoder against SEEDS.md section 4."""

import torch
from lm_checks import V, tiny

from encdec.modules import AttentionInputs


def test_each_layer_cross_attends_to_the_updated_encoder_state_of_the_same_layer():
    model = tiny("parallel_encdec-tiny")
    encoder_outputs, memories = [], []
    for layer in model.layers:
        layer.encoder_block.register_forward_hook(lambda m, args, out: encoder_outputs.append(out[0]))
        layer.decoder_block.register_forward_pre_hook(lambda m, args: memories.append(args[1]))
    with torch.no_grad():
        model(None, torch.randint(0, V, (2, 6)))
    assert len(memories) == len(model.layers) == 2
    for enc, memory in zip(encoder_outputs, memories):
        assert memory is enc


def test_forward_follows_the_seed_pseudocode():
    model = tiny("parallel_encdec-tiny")  # add_pos_embed_to_decoder, MSE encoder loss
    ids = torch.randint(0, V, (2, 6))
    T = ids.shape[1]
    inputs = AttentionInputs(is_causal=True)  # learned positions: no rotation to give positions to
    with torch.no_grad():
        E = model.embed(ids) + model.positions.weight[:T]
        enc, dec = E, model.decoder_in(E) + model.positions.weight[1 : T + 1]
        for layer in model.layers:
            enc, _ = layer.encoder_block(enc, inputs)
            dec, _ = layer.decoder_block(dec, enc, inputs, inputs)
        run = model.run(ids)
    torch.testing.assert_close(run.hidden, model.final_norm(dec))
    torch.testing.assert_close(run.encoder_out, enc)
    torch.testing.assert_close(run.embeddings, E)


def test_encoder_loss_compares_the_final_encoder_state_with_the_embeddings_and_weights_the_training_loss():
    model = tiny("parallel_encdec-tiny").train()  # MSE, coeff 0.25, detached encoder output, INIT LayerNorm
    ids, labels = torch.randint(0, V, (2, 6)), torch.randint(0, V, (2, 6))
    out = model(None, ids, labels=labels)
    run = model.run(ids)
    torch.testing.assert_close(out.aux_losses["encoder_loss"], model.encoder_loss(run.embeddings, run.encoder_out))
    torch.testing.assert_close(out.loss, out.ce_loss + 0.25 * out.aux_losses["encoder_loss"])
    out.aux_losses["encoder_loss"].backward()
    assert all(p.grad is None for layer in model.layers for p in layer.encoder_block.parameters())
    assert model.embed.weight.grad.abs().sum() > 0


def test_validation_reports_plain_cross_entropy():
    model = tiny("parallel_encdec-tiny").eval()
    out = model(None, torch.randint(0, V, (2, 6)), labels=torch.randint(0, V, (2, 6)))
    assert out.aux_losses == {} and torch.equal(out.loss, out.ce_loss)
