"""model.embeddings.decoder_norm_first: the decoder's embedding norm on its (scaled) token embeddings before the
positions are added, norm(s * tokens) + positions (ParlAI's "xlm" variant, BlenderbotSmall's decoder), while the
encoder keeps norm(s * tokens + positions); decoding through the cache reads the same embedding; the setting
needs the embedding norm, the decoder-only family refuses it, and BART's layout will not write it."""

import math

import pytest
import torch

from encdec.errors import ConfigError
from encdec.interop.families import FAMILIES
from encdec.models import EncoderDecoder, ModelConfig, build_model

V = 61


def config(**changed) -> ModelConfig:
    values = dict(vocab_size=V, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, norm="layernorm")
    values |= dict(norm_position="post", bias=True, position="learned", max_positions=32, scale_embeddings=True)
    return ModelConfig.from_dict(
        dict(**values | dict(embedding_norm=True, embeddings={"decoder_norm_first": True}) | changed)
    )


@pytest.fixture
def model() -> EncoderDecoder:
    torch.manual_seed(0)
    model = build_model(config()).eval()
    with torch.no_grad():  # norms off their initial gain and bias, so the order shows
        for stack in (model.encoder, model.decoder):
            stack.embed_norm.weight.normal_(1.0, 0.3)
            stack.embed_norm.bias.normal_(0.0, 0.3)
    return model


def test_the_decoder_norms_its_token_embeddings_before_adding_positions_and_the_encoder_after(model):
    ids, pos = torch.randint(3, V, (2, 7)), torch.arange(7)
    scale = math.sqrt(16)
    for stack, first in ((model.decoder, True), (model.encoder, False)):
        tokens, positions = model.embed(ids) * scale, stack.positions(pos)
        norm = stack.embed_norm
        expected = norm(tokens) + positions if first else norm(tokens + positions)
        torch.testing.assert_close(stack.embed_tokens(ids, pos), expected, rtol=0, atol=1e-6)
    assert not torch.allclose(
        model.decoder.embed_norm(tokens) + positions, model.decoder.embed_norm(tokens + positions)
    )


def test_decoding_through_the_cache_equals_the_full_forward(model):
    src, tgt = torch.randint(3, V, (2, 9)), torch.randint(3, V, (2, 6))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 5:] = False
    full = model(src, tgt, src_mask=mask).logits
    state = model.start(src, mask, max_new_tokens=6)
    steps = [model.step(tgt[:, :2], state)] + [model.step(tgt[:, t : t + 1], state) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_the_place_is_the_only_difference_from_the_norm_after_positions(model):
    """Off, the same weights compute BART's norm(s * tokens + positions) in the decoder too: one setting, same
    parameters (the count is unchanged)."""
    after = build_model(config(embeddings={"decoder_norm_first": False})).eval()
    after.load_state_dict(model.state_dict())
    ids, pos = torch.randint(3, V, (1, 5)), torch.arange(5)
    torch.testing.assert_close(after.encoder.embed_tokens(ids, pos), model.encoder.embed_tokens(ids, pos))
    assert not torch.allclose(after.decoder.embed_tokens(ids, pos), model.decoder.embed_tokens(ids, pos))


def test_flat_and_old_configs_read_it_off_and_it_round_trips():
    assert ModelConfig().embeddings.decoder_norm_first is False
    assert ModelConfig.from_dict(config().to_dict()) == config()


@pytest.mark.parametrize(
    "changed, message",
    [
        (dict(embedding_norm=False), "model.embeddings.decoder_norm_first places the embedding norm"),
        (dict(family="decoder_only"), "model.embeddings.decoder_norm_first is not used by the decoder_only family"),
        (dict(embeddings={"decoder_norm_first": 1}), "model.embeddings.decoder_norm_first"),
    ],
)
def test_refused_in_one_sentence(changed, message):
    with pytest.raises(ConfigError, match=message):
        build_model(config(**changed))


def test_bart_s_layout_refuses_to_write_it():
    with pytest.raises(ConfigError, match="embeddings.decoder_norm_first must be false"):
        FAMILIES["bart"].check(config(position_offset=2))
