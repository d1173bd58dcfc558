"""Which feed-forwards are mixtures of experts: every one by default, or every moe_every-th (decoder_moe_every for
the decoder) in Switch Transformers' layout; the router losses come from those layers alone, and a step that
cannot act is one sentence."""

import pytest
import torch

import encdec
from encdec.errors import ConfigError
from encdec.modules import MoE


def tiny(**overrides):
    torch.manual_seed(0)
    cfg = encdec.preset("t5-tiny", vocab_size=64, dropout=0.0, **overrides)
    return encdec.build_model(cfg).eval()


@pytest.mark.parametrize("layers", range(1, 13))
@pytest.mark.parametrize("step", range(1, 13))
def test_the_sparse_layers_are_transformers_switch_layout(layers, step):
    if step > layers:
        return
    cfg = encdec.preset("t5-tiny", n_experts=2, n_encoder_layers=layers, moe_every=step)
    transformers_rule = [i % step == 1 or step == 1 for i in range(layers)]  # SwitchTransformersStack
    assert [cfg.moe_layer(i) for i in range(layers)] == transformers_rule


@pytest.mark.parametrize("layers,step", [(12, 4), (7, 3), (4, 1), (6, 2)])
def test_the_last_place_is_transformers_nllb_moe_layout(layers, step):
    cfg = encdec.preset("t5-tiny", n_encoder_layers=layers, experts={"count": 2, "every": step, "place": "last"})
    transformers_rule = [(i + 1) % step == 0 for i in range(layers)]  # NllbMoeEncoder
    assert [cfg.moe_layer(i) for i in range(layers)] == transformers_rule


def test_the_built_model_has_experts_where_the_config_says_and_their_router_losses_alone():
    model = tiny(n_experts=3, n_encoder_layers=4, n_decoder_layers=3, moe_every=2, decoder_moe_every=3).train()
    assert [isinstance(b.ffn, MoE) for b in model.encoder.blocks] == [False, True, False, True]
    assert [isinstance(b.ffn, MoE) for b in model.decoder.blocks] == [False, True, False]
    ids = torch.randint(2, 64, (2, 8))
    memory = model.encode(ids)
    assert len(memory.router_logits) == 2 and len(model.decode(ids, memory)[1]) == 1
    out = model(ids, ids, labels=ids)
    assert {"moe_aux_encoder", "moe_z_encoder", "moe_aux_decoder", "moe_z_decoder"} <= set(out.aux_losses)


def test_every_feed_forward_is_sparse_by_default():
    model = tiny(n_experts=2)
    assert all(isinstance(b.ffn, MoE) for stack in (model.encoder, model.decoder) for b in stack.blocks)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"moe_every": 2}, "model.experts.every acts only with model.experts.count above 1; remove it"),
        ({"decoder_moe_every": 1}, "model.experts.decoder_every acts only with model.experts.count above 1; remove it"),
        ({"n_experts": 2, "moe_every": 3}, "model.experts.every (3) exceeds the encoder's 2 layers"),
        (
            {"n_experts": 2, "n_encoder_layers": 4, "n_decoder_layers": 1, "moe_every": 2},
            "model.experts.every (2) exceeds the decoder's 1 layer; set model.experts.decoder_every",
        ),
        ({"n_experts": 2, "decoder_moe_every": 3}, "model.experts.decoder_every (3) exceeds the decoder's 2 layers"),
    ],
)
def test_a_step_that_cannot_act_is_one_sentence(overrides, message):
    with pytest.raises(ConfigError) as refused:
        tiny(**overrides)
    assert str(refused.value) == message


@pytest.mark.parametrize("family", ["decoder_only", "ar_encdec", "rnn_seq2seq"])
def test_the_families_that_make_every_feed_forward_sparse_refuse_a_step(family):
    name = "experts" if family == "rnn_seq2seq" else "experts.every"  # the RNN, without feed-forwards, the whole spec
    with pytest.raises(ConfigError, match=f"^model.{name} is not used by the {family} family; remove it$"):
        encdec.build_model(encdec.preset(f"{family}-tiny", moe_every=2))


@pytest.mark.parametrize("moe_every, decoder_moe_every", [(1, None), (2, None), (3, 1), (1, 2), (2, 3)])
def test_the_fit_check_counts_experts_only_in_the_sparse_layers(moe_every, decoder_moe_every):
    """weights_memory.estimated_parameters, which the fit check reads before building, stays an upper estimate
    and counts a Switch layout's experts only in its sparse layers (it counted them in every layer: about
    twice a Switch model's size)."""
    from encdec.models.weights_memory import estimated_parameters, sparse_layers

    for layers in (3, 4, 7):
        cfg = encdec.preset(
            "t5-tiny",
            vocab_size=100,
            d_ff=1024,  # the experts weigh most, as in Switch
            activation="gated_gelu",  # three matrices a feed-forward, as the estimate counts any
            moe_activation="gated_gelu",
            n_encoder_layers=layers,
            n_decoder_layers=layers + 1,
            n_experts=8,
            moe_every=moe_every,
            decoder_moe_every=decoder_moe_every,
        )
        for decoder, depth in ((False, cfg.n_encoder_layers), (True, cfg.decoder_layers)):
            assert sparse_layers(cfg, depth, decoder) == sum(cfg.moe_layer(i, decoder) for i in range(depth))
        real = sum(p.numel() for p in encdec.build_model(cfg).parameters())
        assert real <= estimated_parameters(cfg) < 1.2 * real


def test_the_balance_of_all_choices_over_real_tokens_is_transformers_nllb_moe_load_balancing_loss():
    nllb = pytest.importorskip("transformers.models.nllb_moe.modeling_nllb_moe")
    from encdec.models.moe_losses import moe_losses

    torch.manual_seed(0)
    logits = [torch.randn(2 * 5, 4) for _ in range(3)]  # three sparse layers over a batch of 2 rows of 5
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    expected = nllb.load_balancing_loss_func(tuple(logits), 4, top_k=2, attention_mask=mask)
    got = moe_losses(
        logits,
        logits,
        *encdec.ModelConfig(experts={"count": 4, "top_k": 2, "balance": "all"}).experts.balance_args(mask),
    )
    torch.testing.assert_close(got["moe_aux_encoder"], expected)
    torch.testing.assert_close(got["moe_aux_decoder"], nllb.load_balancing_loss_func(tuple(logits), 4, top_k=2))
    first = moe_losses(logits, [])["moe_aux_encoder"]  # Switch's: the first choice of every token
    torch.testing.assert_close(first, nllb.load_balancing_loss_func(tuple(logits), 4, top_k=1))
