"""The auto-regressive encoder-decoder against SEEDS.md section 3, option by option."""

import math

import pytest
import torch
from lm_checks import AR_ALL_ON as ALL_ON
from lm_checks import V, tiny

from encdec.errors import ConfigError
from encdec.models import ModelConfig
from encdec.models.research_config import ResearchOptions
from encdec.models.research_losses import EmbeddingLoss, cumulative_mean, disaffinity

# hand-built: E rows [1, 0], [3, 0] have cumulative means [1, 0], [2, 0]
E = torch.tensor([[[1.0, 0.0], [3.0, 0.0]]])


def plain_loss(kind: str) -> EmbeddingLoss:
    return EmbeddingLoss(2, kind, "NONE", "NONE", use_ln_on_encoder_out=False)


def test_cumulative_mean_averages_positions_up_to_and_including_t():
    assert torch.equal(cumulative_mean(E), torch.tensor([[[1.0, 0.0], [2.0, 0.0]]]))


def test_mse_embedding_loss_on_hand_built_tensors():
    enc = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])  # errors 0 and 2 in one coordinate of four
    assert plain_loss("MSE")(E, enc).item() == pytest.approx(1.0)


def test_cosine_and_log_cosine_losses_on_hand_built_tensors():
    enc = torch.tensor([[[0.0, 1.0], [5.0, 0.0]]])  # cosines 0 and 1 with the means
    assert plain_loss("COSINE")(E, enc).item() == pytest.approx((0.5 + 0.0) / 2)
    assert plain_loss("LOG_COSINE")(E, enc).item() == pytest.approx(math.log(2) / 2)


def test_init_normalises_embeddings_before_averaging_and_avg_cum_sum_after():
    torch.manual_seed(1)
    embeddings, enc = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    init = EmbeddingLoss(8, "MSE", "NONE", "INIT", use_ln_on_encoder_out=True)
    after = EmbeddingLoss(8, "MSE", "NONE", "AVG_CUM_SUM", use_ln_on_encoder_out=True)
    after.load_state_dict(init.state_dict())
    ln_a, ln_b = init.embedding_norm, init.encoder_norm
    assert ln_a.bias is not None and ln_b.bias is not None  # both LayerNorms have a bias
    expected_init = disaffinity("MSE", cumulative_mean(ln_a(embeddings)), ln_b(enc))
    expected_after = disaffinity("MSE", ln_a(cumulative_mean(embeddings)), ln_b(enc))
    torch.testing.assert_close(init(embeddings, enc), expected_init)
    torch.testing.assert_close(after(embeddings, enc), expected_after)
    assert not torch.allclose(expected_init, expected_after)


@pytest.mark.parametrize(
    "detach,trained,frozen", [("ENCODER_OUT", "embeddings", "enc"), ("EMBEDDING", "enc", "embeddings")]
)
def test_detach_stops_the_gradient_into_one_side(detach, trained, frozen):
    tensors = {"embeddings": torch.randn(1, 4, 6, requires_grad=True), "enc": torch.randn(1, 4, 6, requires_grad=True)}
    EmbeddingLoss(6, "MSE", detach, "INIT", True)(tensors["embeddings"], tensors["enc"]).backward()
    assert tensors[frozen].grad is None
    assert tensors[trained].grad.abs().sum() > 0


def test_detached_encoder_output_gets_no_gradient_from_the_embedding_loss_in_the_model():
    model = tiny("ar_encdec-tiny", research=dict(embedding_loss="MSE", detach="ENCODER_OUT")).train()
    ids = torch.randint(0, V, (2, 8))
    model(None, ids).aux_losses["embedding_loss"].backward()
    assert all(p.grad is None for p in model.encoder_blocks.parameters())
    assert model.embed.weight.grad.abs().sum() > 0 and model.positions.weight.grad.abs().sum() > 0


def test_training_loss_adds_the_weighted_embedding_loss_and_validation_reports_plain_ce():
    model = tiny("ar_encdec-tiny", research=dict(embedding_loss="COSINE", embedding_loss_coeff=3.0)).train()
    ids, labels = torch.randint(0, V, (2, 8)), torch.randint(0, V, (2, 8))
    out = model(None, ids, labels=labels)
    torch.testing.assert_close(out.loss, out.ce_loss + 3.0 * out.aux_losses["embedding_loss"])
    model.eval()
    out = model(None, ids, labels=labels)
    assert out.aux_losses == {} and torch.equal(out.loss, out.ce_loss)


@pytest.mark.parametrize("position", ["learned", "rope"])  # with rope the table is kept for this alone
def test_subtraction_uses_the_embeddings_of_positions_one_to_t(position):
    model = tiny("ar_encdec-tiny", position=position, research=dict(sub_pos_embed="YES_NO_LN"))
    ids = torch.randint(0, V, (2, 7))
    with torch.no_grad():
        subtracted = model.run(ids).hidden
        model.config.research.sub_pos_embed = "NO"
        plain = model.run(ids).hidden
    torch.testing.assert_close(plain - subtracted, model.positions.weight[1:8].expand(2, 7, -1))


def test_adding_to_the_decoder_input_uses_positions_one_to_t():
    model = tiny("ar_encdec-tiny", research=dict(add_pos_embed_to_decoder=True))
    seen = []
    model.decoder_blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    ids = torch.randint(0, V, (2, 7))
    with torch.no_grad():
        model.run(ids)
        model.config.research.add_pos_embed_to_decoder = False
        model.run(ids)
    torch.testing.assert_close(seen[0] - seen[1], model.positions.weight[1:8].expand(2, 7, -1))


@pytest.mark.parametrize(
    "research,rows", [({}, 128), (dict(sub_pos_embed="YES_LN"), 129), (dict(add_pos_embed_to_decoder=True), 129)]
)
def test_position_table_has_one_more_row_when_adding_or_subtracting(research, rows):
    research = {"sub_pos_embed": "NO", "embedding_loss": "NONE", "embedding_loss_coeff": None, **research}
    assert tiny("ar_encdec-tiny", research=research).positions.weight.shape[0] == rows


def test_yes_ln_adds_a_layernorm_after_subtraction_and_ln_before_decoder_linear_is_optional():
    model = tiny("ar_encdec-tiny", research=ALL_ON)
    assert model.post_sub_norm is not None and model.decoder_in_norm is not None
    assert model.decoder_blocks[0].cross_first  # ALT: cross-attention first
    plain = tiny("ar_encdec-tiny", research=dict(sub_pos_embed="NO"))
    assert plain.post_sub_norm is None and plain.decoder_in_norm is None and not plain.decoder_blocks[0].cross_first


def test_cross_attention_has_its_own_head_count_defaulting_to_twice_the_self_attention_heads():
    assert tiny("ar_encdec-tiny", cross_n_heads=2).decoder_blocks[0].cross_attn.n_heads == 2
    default = tiny("ar_encdec-tiny", cross_n_heads=None)
    assert default.decoder_blocks[0].cross_attn.n_heads == 2 * default.config.n_heads


def test_causal_cross_attention_does_not_see_later_encoder_positions():
    model = tiny("ar_encdec-tiny")
    block = model.decoder_blocks[0]
    from encdec.modules import AttentionInputs

    inputs = AttentionInputs(is_causal=True)
    x, memory = torch.randn(1, 6, 64), torch.randn(1, 6, 64)
    later = memory.clone()
    later[:, 4:] = torch.randn(1, 2, 64)  # a constant shift would vanish in the memory LayerNorm
    with torch.no_grad():
        a, _ = block(x, memory, inputs, inputs)
        b, _ = block(x, later, inputs, inputs)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_init_scales_residual_projections_by_the_per_side_depth():
    model = tiny("ar_encdec-tiny", d_model=128, d_ff=512, n_encoder_layers=2)
    residual_std = 0.02 / math.sqrt(2 * 2)
    for block in (model.encoder_blocks[1], model.decoder_blocks[0]):
        assert block.self_attn.o.weight.std().item() == pytest.approx(residual_std, rel=0.1)
        assert block.ffn.wo.weight.std().item() == pytest.approx(residual_std, rel=0.1)
        assert block.self_attn.q.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.decoder_blocks[1].cross_attn.o.weight.std().item() == pytest.approx(residual_std, rel=0.1)
    assert model.decoder_in.weight.std().item() == pytest.approx(0.02, rel=0.1)


@pytest.mark.parametrize(
    "values,message",
    [
        (dict(order_type="SIDEWAYS"), "model.research.order_type must be one of ORIGINAL, ALT"),
        (
            dict(embedding_loss="KL"),
            "model.research.embedding_loss must be one of NONE, MSE, COSINE, LOG_COSINE, L1, HUBER",
        ),
        (dict(detach="ENCODER_OUT"), "model.research.detach is set but model.research.embedding_loss is NONE"),
        (dict(embedding_loss="MSE", embedding_loss_coeff=-1.0), "embedding_loss_coeff must be positive"),
    ],
)
def test_bad_research_options_raise_one_sentence_naming_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        ResearchOptions(**values)


def test_config_with_research_options_round_trips_through_a_dict():
    cfg = tiny("ar_encdec-tiny", research=ALL_ON).config
    assert isinstance(cfg.research, ResearchOptions)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_loss_options_take_the_seed_codes_defaults():
    r = ResearchOptions(embedding_loss="MSE")
    assert (r.embedding_loss_coeff, r.detach, r.embedding_ln_type, r.use_ln_on_encoder_out) == (
        1.0,
        "ENCODER_OUT",
        "INIT",
        True,
    )
    assert (r.embedding_aggregation, r.embedding_norm_affine) == ("MEAN", True)  # the seeds' mean and norms
