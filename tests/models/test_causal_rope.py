"""RoPE in the causal LMs: no position table in the input, rotated self- and cross-attention, a learned
table kept only for the research families' position subtraction / addition, and decoding that still
equals the full forward."""

import pytest
import torch
from lm_checks import (
    RESEARCH_LAYOUT,
    V,
    assert_lm_cached_equals_full,
    assert_lm_generate_is_greedy_over_full_forward,
    tiny,
)

import encdec
from encdec.errors import ConfigError
from encdec.modules import Attention

PRESETS = ["ar_encdec-tiny", "parallel_encdec-tiny", "decoder_only-tiny"]
RESEARCH = ["ar_encdec-tiny", "parallel_encdec-tiny"]
ALL_ON = dict(RESEARCH_LAYOUT, embedding_loss="MSE", embedding_aggregation="MATMUL")
NO_POSITIONS = dict(sub_pos_embed="NO", add_pos_embed_to_decoder=False)


def rope(name: str, **overrides):
    return tiny(name, position="rope", dropout=0.0, **overrides)


@pytest.mark.parametrize("name", PRESETS)
def test_the_input_is_the_token_embedding_alone_and_attention_rotates(name):
    research = dict(research=NO_POSITIONS) if name in RESEARCH else {}
    model = rope(name, **research)
    assert model.positions is None  # no table at all without subtraction or addition
    ids = torch.randint(0, V, (2, 7))
    columns = model.embed_columns(ids)
    torch.testing.assert_close(columns.embeddings, model.embed(ids))
    assert torch.equal(columns.attention.q_pos, torch.arange(7)) and columns.attention.k_pos is columns.attention.q_pos
    self_attentions = [m.self_attn for m in model.modules() if hasattr(m, "self_attn")]
    assert self_attentions and all(a.rotary is not None for a in self_attentions)


@pytest.mark.parametrize("name", RESEARCH)
def test_cross_attention_rotates_by_its_own_head_width_unless_rope_cross_is_none(name):
    model = rope(name)
    cross = [m.cross_attn for m in model.modules() if hasattr(m, "cross_attn")]
    assert cross and all(a.rotary is not None and a.rotary.d_head == a.d_head for a in cross)
    self_rotary = next(m.self_attn.rotary for m in model.modules() if hasattr(m, "cross_attn"))
    assert cross[0].d_head == 8 and self_rotary.d_head == 16  # 64 / 8 cross heads, 64 / 4 heads
    same_width = rope(name, cross_n_heads=4)
    block = next(m for m in same_width.modules() if hasattr(m, "cross_attn"))
    assert block.cross_attn.rotary is block.self_attn.rotary  # one module when the widths agree
    plain = rope(name, rope_cross="none")
    assert all(m.cross_attn.rotary is None for m in plain.modules() if hasattr(m, "cross_attn"))


@pytest.mark.parametrize("name", RESEARCH)
@pytest.mark.parametrize("research", [dict(sub_pos_embed="YES_NO_LN"), dict(add_pos_embed_to_decoder=True)])
def test_subtraction_or_addition_keeps_a_learned_table_of_one_more_row(name, research):
    model = rope(name, research=research)
    table = model.positions.weight
    assert table.shape == (model.config.positions.max + 1, model.config.d_model)
    assert table.std().item() == pytest.approx(0.02, rel=0.1)  # initialised as the learned table is


@pytest.mark.parametrize("name", PRESETS)
def test_the_rotations_act_on_the_logits(name):
    research = dict(research=NO_POSITIONS) if name in RESEARCH else {}
    model = rope(name, **research)
    ids = torch.randint(0, V, (2, 8))
    with torch.no_grad():
        rotated = model(None, ids).logits
        for attention in (m for m in model.modules() if isinstance(m, Attention)):
            attention.rotary = None
        plain = model(None, ids).logits
    torch.testing.assert_close(rotated[:, 0], plain[:, 0])  # position 0 turns by angle 0
    assert not torch.allclose(rotated[:, 1:], plain[:, 1:])


# the research families' own files check both positions with their presets and every option on
CACHED = [("decoder_only-tiny", {})] + [(name, dict(research=ALL_ON, rope_cross="none")) for name in RESEARCH]


@pytest.mark.parametrize(
    "name,overrides", CACHED, ids=["decoder_only", "ar_encdec-no-cross-rope", "parallel-no-cross-rope"]
)
def test_cached_decoding_with_rope_equals_the_full_forward(name, overrides, device):
    assert_lm_cached_equals_full(rope(name, **overrides).to(device))


@pytest.mark.parametrize("name", PRESETS)
def test_generate_with_rope_is_greedy_over_the_full_forward(name, device):
    research = dict(research=ALL_ON) if name in RESEARCH else {}
    assert_lm_generate_is_greedy_over_full_forward(rope(name, **research).to(device))


@pytest.mark.parametrize("name", PRESETS)
def test_a_left_padded_rope_batch_equals_each_prompt_alone(name):
    research = dict(research=ALL_ON) if name in RESEARCH else {}
    model = rope(name, **research)
    pad = V - 2
    prompts = [torch.randint(0, pad, (n,), generator=torch.Generator().manual_seed(n)) for n in (6, 2, 4)]
    ids = torch.full((3, 6), pad)
    mask = torch.zeros(3, 6, dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, 6 - len(prompt) :], mask[i, 6 - len(prompt) :] = prompt, 1
    batched = encdec.generate(model, ids, mask, max_new_tokens=5, eos_token_id=[])
    for i, prompt in enumerate(prompts):
        alone = encdec.generate(model, prompt[None], max_new_tokens=5, eos_token_id=[])
        assert torch.equal(batched[i], alone[0])


@pytest.mark.parametrize(
    "name,overrides,message",
    [
        ("ar_encdec-tiny", dict(position="sinusoidal"), "needs model.positions.kind learned or rope, got 'sinusoidal'"),
        (
            "parallel_encdec-tiny",
            dict(rope_theta=500.0),
            "model.positions.rope_theta acts only with model.positions.kind rope",
        ),
        (
            "ar_encdec-tiny",
            dict(position="rope", rope_cross="prepended"),
            "cross_attention.rope prepended does not apply",
        ),
        ("decoder_only-tiny", dict(position="rope", rope_cross="none"), "model.cross_attention is not used"),
        ("ar_encdec-tiny", dict(position="rope", d_model=60, n_heads=2, cross_n_heads=None), "cross heads = 15"),
    ],
)
def test_position_settings_a_causal_lm_cannot_honour_are_refused_in_one_sentence(name, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny(name, **overrides)
