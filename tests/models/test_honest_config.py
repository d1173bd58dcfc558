"""Every family honours the settings it is given or refuses them in one sentence (STYLE.md 13).

Each family's fields are split three ways: UNUSED (declared by the family, refused when
set), value rules (a value the family cannot build, refused with its reason), and the
rest, each of which must change the built model: its parameters, or its outputs (but for
the Hugging Face family an export names, which changes the export).
"""

import dataclasses
import functools
import re

import pytest
import torch
from lm_checks import V, assert_lm_cached_equals_full

from encdec.cli.demo import print_presets
from encdec.errors import ConfigError
from encdec.models import (
    FAMILY_CLASSES,
    ModelConfig,
    build_model,
    check_fields,
    count_parameters,
    preset,
    preset_names,
)
from encdec.models.config_specs import MOVED, SPECS
from encdec.modules import Attention, AttentionInputs, MoE

PRESETS = {
    "encoder_decoder": "t5-tiny",
    "ar_encdec": "ar_encdec-tiny",
    "parallel_encdec": "parallel_encdec-tiny",
    "decoder_only": "decoder_only-tiny",
    "rnn_seq2seq": "rnn_seq2seq-tiny",
    "whisper": "whisper-tiny",  # made small (SHAPES), its sources log-mels (sources)
}
TRANSFORMERS = [f for f in PRESETS if f not in ("rnn_seq2seq", "whisper")]  # of token ids
# a family's preset made as small as the others' tiny ones
SHAPES = {"whisper": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2, audio={"max_source_positions": 32})}
CAUSAL = ["ar_encdec", "parallel_encdec", "decoder_only"]
NOT_MODEL = {"family", "vocab_size", "pad_id", "eos_id", "decoder_start_id"}  # identity and token ids
# a value each family refuses with its own reason (tested below), rather than a field it ignores
VALUE_RULES = {
    "ar_encdec": {"position"},
    "parallel_encdec": {"position"},
    "decoder_only": {"position"},
    "rnn_seq2seq": {"n_decoder_layers"},
    "encoder_decoder": set(),
    "whisper": {"position", "attention_bias"},  # learned decoder positions; qkv biases only without model.bias
}

# a value away from each field's default and the tiny presets' (bools are flipped), a line a theme where one fits
ALTERNATIVE = (
    dict(d_model=32, n_heads=2, n_kv_heads=1, d_head=8, d_ff=32, n_encoder_layers=3, n_decoder_layers=1)
    | dict(cross_n_heads=2, cross_n_kv_heads=1)
    | dict(encoder_d_model=48, encoder_d_ff=48, encoder_n_heads=2, encoder_n_kv_heads=1, encoder_d_head=8)
    | dict(activation="silu", norm_eps=1e-2, norm_position="post")
    | dict(position="sinusoidal", max_positions=64, sinusoidal_layout="halves", position_offset=2)
    | dict(relative_buckets=16, relative_max_distance=64, rope_theta=500.0, rope_cross="none", dropout=0.3)
    | dict(n_experts=4, moe_every=2, decoder_moe_every=2, moe_top_k=2, moe_activation="relu")
    | dict(aux_loss_coef=0.5, z_loss_coef=0.5, research=dict(order_type="ALT"), rnn_cell="lstm", hf_model_type="mt5")
    | dict(attention_scale_dim=7, attention_softcap=0.5, logit_softcap=0.5, sliding_window=2, global_every=3)
    | dict(encoder_attention="transient_global", sliding_window_layout="split", rope_local_theta=50.0, rope_scale=4.0)
    | dict(eoi_token_id=3, image_token_id=3, local_radius=2, global_block_size=4, attention_bias="qkv")
    | {"experts.place": "last", "experts.capacity": 1, "experts.second_expert_policy": "random"}
    | {"experts.balance": "all", "experts.token_dropout": 0.5, "experts.eval_capacity_fraction": 0.5}
    | {"encoder.max_positions": 96, "global_tokens": "first", "encoder.vocab_size": V + 8}
    | {"attention.kinds": {"dilated_band": {"width": 2, "dilation": 2}}, "attention.implementation": "flex"}
    | {
        "audio.n_mels": 16,
        "audio.max_source_positions": 64,
        "audio.ctc_weight": 0.5,
    }  # the whisper family's (tests/models/test_whisper.py)
)
# fields that change what an export writes, not the model: tests/interop holds them honoured
EXPORT_ONLY = {"hf_model_type"}
# a field that refuses inputs rather than change what the model computes (tests/interop/test_hf_t5gemma2.py)
EXPORT_ONLY |= {"image_token_id"}
# what only evaluation (a capacity of its own) or a padded batch (padding's routing) reads, which the fingerprint's
# train-mode batch without padding cannot show: tests/modules/test_moe.py holds them honoured against transformers
EXPORT_ONLY |= {"experts.eval_capacity_fraction", "experts.route_padding"}
# how attention is computed, not what: tests/modules/test_flex_attention.py holds FlexAttention equal to the dense path
EXPORT_ONLY |= {"attention.implementation"}
# what a field needs around it to have an effect at all (e.g. MoE settings need experts)
CONTEXT = dict(
    moe_top_k=dict(n_experts=4),
    moe_every=dict(n_experts=4),
    decoder_moe_every=dict(n_experts=4),
    moe_renormalize=dict(n_experts=4),
    moe_activation=dict(n_experts=4),
    aux_loss_coef=dict(n_experts=4),
    z_loss_coef=dict(n_experts=4),
    rope_theta=dict(position="rope"),
    rope_cross=dict(position="rope"),
    sinusoidal_layout=dict(position="sinusoidal"),
    max_positions=dict(position="learned"),
    position_offset=dict(position="learned"),
    attention_scale_dim=dict(scale_attention=True),
    sliding_window=dict(position="rope"),
    global_every=dict(position="rope", sliding_window=2),
    local_radius=dict(encoder_attention="local"),
    sliding_window_layout=dict(position="rope", sliding_window=2),
    rope_local_theta=dict(position="rope", sliding_window=2),
    rope_scale=dict(position="rope"),
    qk_norm=dict(position="rope"),
    merged_cross_attention=dict(position="rope", rope_cross="none"),
    global_block_size=dict(encoder_attention="transient_global"),
    encoder_d_model=dict(shared_embeddings=False),  # an encoder of its own width reads a table of its own
    # the decoder's embedding norm placed before its positions: there must be both
    **{"embeddings.decoder_norm_first": dict(embedding_norm=True, position="learned")},
    **{"experts.place": dict(n_experts=4, moe_every=4, n_encoder_layers=4), "experts.token_dropout": dict(n_experts=4)},
    **{"experts.balance": dict(n_experts=4, moe_top_k=2)},
    **{"experts.second_expert_policy": dict(n_experts=4, moe_top_k=2), "experts.capacity": dict(n_experts=4)},
    **{"experts.normalize_before_dropping": {"n_experts": 4, "moe_top_k": 2, "experts": {"capacity": 1}}},
    **{"experts.batch_prioritized": {"n_experts": 4, "experts": {"capacity": 1}}},
    **{"encoder.max_positions": dict(position="learned", max_positions=64)},
    **{"encoder.vocab_size": dict(shared_embeddings=False)},  # FSMT's source vocabulary, in a table of its own
    **{"global_tokens": dict(encoder_attention="local_global", local_radius=2)},
)
# every setting by the name a preset's override takes: a spec's fields by their flat names (MOVED), one that never
# had a flat name by its place ("embeddings.decoder_norm_first")
FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if f.name not in NOT_MODEL | set(SPECS)] + list(MOVED)
FIELDS += [f"{name}.{f.name}" for name, spec in SPECS.items() for f in dataclasses.fields(spec)]
FIELDS = [field for field in FIELDS if field not in MOVED.values()]


def place(field: str) -> str:
    """Where a field lives, as refusals name it: "n_experts" -> "experts.count"."""
    return MOVED.get(field, field)


def setting(field: str, value) -> dict:
    """An override of `field` as a preset takes it: a spec's field with no flat name in its spec."""
    spec, _, key = field.rpartition(".")
    return {spec: {key: value}} if spec else {field: value}


def unused_fields(family: str) -> set[str]:
    """The family's UNUSED as FIELDS names them: a spec it refuses whole is each of its fields."""
    unused = FAMILY_CLASSES[family].UNUSED
    return {field for field in FIELDS if place(field) in unused or place(field).split(".")[0] in unused}


def refused_as(family: str, field: str) -> str:
    """The name the family's refusal of `field` gives: its place, or the whole spec the family refuses."""
    spec = place(field).split(".")[0]
    return spec if spec in FAMILY_CLASSES[family].UNUSED else place(field)


def config(family: str, **overrides) -> ModelConfig:
    base = dict(dropout=0.0) if family != "rnn_seq2seq" else {}
    shape = SHAPES.get(family, {})
    if "audio" in overrides:  # a spec's keys over the shape's
        shape = {**shape, "audio": {**shape.get("audio", {}), **overrides.pop("audio")}}
    ids = dict(vocab_size=V, pad_id=V - 2, eos_id=V - 1, decoder_start_id=0)
    return preset(PRESETS[family], **ids, **{**base, **shape, **overrides})


def build(family: str, **overrides):
    torch.manual_seed(0)
    return build_model(config(family, **overrides))


def alternative(field: str, cfg: ModelConfig):
    value = functools.reduce(getattr, place(field).split("."), cfg)
    if field == "norm":
        return "rmsnorm" if value == "layernorm" else "layernorm"
    if field == "init":
        return "normal" if value == "t5" else "t5"
    if isinstance(value, bool) or (value is None and field.startswith("scale_")):
        return not value
    return ALTERNATIVE[field]


def fingerprint(model) -> tuple:
    """Parameter names, shapes and values, and train-mode logits and loss on a fixed batch."""
    g = torch.Generator().manual_seed(1)
    src, tgt, labels = (torch.randint(0, V - 2, (2, 24), generator=g) for _ in range(3))
    if model.config.family == "whisper":  # 64 frames of log-mels: 32 positions, room for CTC's 24 targets
        src = torch.randn(2, model.config.audio.n_mels, 64, generator=g)
    torch.manual_seed(2)
    out = model.train()(src, tgt, labels=labels)
    return model.state_dict(), out.logits.detach(), out.loss.detach()


def same(a: tuple, b: tuple) -> bool:
    (sd_a, *outs_a), (sd_b, *outs_b) = a, b
    if [(k, v.shape) for k, v in sd_a.items()] != [(k, v.shape) for k, v in sd_b.items()]:
        return False
    return all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a) and all(map(torch.equal, outs_a, outs_b))


@pytest.mark.parametrize("family", PRESETS)
def test_every_field_is_declared_unused_value_checked_or_honoured(family):
    unused = FAMILY_CLASSES[family].UNUSED
    assert unused <= {place(field) for field in FIELDS} | set(SPECS) and not unused_fields(family) & VALUE_RULES[family]


HONOURED = [
    (f, field) for f in PRESETS for field in FIELDS if field not in unused_fields(f) | VALUE_RULES[f] | EXPORT_ONLY
]
REFUSED = [(f, field) for f in PRESETS for field in sorted(unused_fields(f))]


@pytest.mark.parametrize("family,field", HONOURED, ids=[f"{f}-{field}" for f, field in HONOURED])
def test_an_honoured_field_changes_the_model(family, field):
    context = CONTEXT.get(field, {})
    if family == "whisper":  # its decoder's positions are learned, whatever the field's context elsewhere
        context = {key: value for key, value in context.items() if key != "position"}
    base = config(family, **context)
    changed = {**context, **setting(field, alternative(field, base))}
    assert not same(fingerprint(build(family, **context)), fingerprint(build(family, **changed)))


@pytest.mark.parametrize("family,field", REFUSED, ids=[f"{f}-{field}" for f, field in REFUSED])
def test_an_unused_field_is_refused_in_one_sentence(family, field):
    overrides = setting(field, alternative(field, config(family)))
    if field == "moe_top_k":  # above 1 it needs experts, which the family refuses first
        overrides = dict(n_experts=4, moe_top_k=2)
        field = "n_experts"
    with pytest.raises(ConfigError) as refused:
        build(family, **overrides)
    name = refused_as(family, field)
    assert str(refused.value) == f"model.{name} is not used by the {family} family; remove it"
    with pytest.raises(ConfigError, match=f"^model.{name} is not used"):  # also without building
        check_fields(config(family, **overrides))


@pytest.mark.parametrize("position", ["sinusoidal", "relative"])
@pytest.mark.parametrize("family", CAUSAL)
def test_causal_lms_need_learned_or_rope_positions(family, position):
    with pytest.raises(ConfigError, match=f"needs model.positions.kind learned or rope, got '{position}'$"):
        build(family, position=position)


@pytest.mark.parametrize("family", CAUSAL)
def test_causal_lms_refuse_rope_settings_without_rope(family):
    with pytest.raises(
        ConfigError, match="^model.positions.rope_theta acts only with model.positions.kind rope; remove it$"
    ):
        build(family, rope_theta=500.0)


def test_rnn_decoder_depth_must_equal_the_encoders():
    with pytest.raises(ConfigError, match="n_decoder_layers equal to model.n_encoder_layers"):
        build("rnn_seq2seq", n_decoder_layers=2)


@pytest.mark.parametrize("family", TRANSFORMERS)
def test_gqa_gives_every_attention_fewer_kv_heads_and_parameters(family):
    mha, gqa = build(family), build(family, n_kv_heads=2)
    attentions = [m for m in gqa.modules() if isinstance(m, Attention)]
    assert attentions and all(a.n_kv_heads == 2 for a in attentions)  # cross-attention follows n_kv_heads too
    assert all(a.k.weight.shape[0] == a.v.weight.shape[0] == 2 * a.d_head for a in attentions)
    assert count_parameters(gqa) < count_parameters(mha)


@pytest.mark.parametrize("family", TRANSFORMERS)
def test_experts_replace_every_feed_forward_and_their_losses_join_the_loss(family):
    model = build(family, n_experts=4)
    blocks = [m for m in model.modules() if hasattr(m, "ffn")]
    assert blocks and all(isinstance(b.ffn, MoE) and len(b.ffn.experts) == 4 for b in blocks)
    ids, labels = torch.randint(0, V - 2, (2, 8)), torch.randint(0, V - 2, (2, 8))
    out = model.train()(ids, ids, labels=labels)
    sides = ("decoder",) if family == "decoder_only" else ("encoder", "decoder")
    assert {f"moe_{kind}_{side}" for kind in ("aux", "z") for side in sides} <= set(out.aux_losses)
    extra = {k: v for k, v in out.aux_losses.items() if not k.startswith("moe_")}  # the research families' term
    base = out.ce_loss + sum(model.config.research.embedding_loss_coeff * v for v in extra.values())
    cfg, terms = model.config, out.aux_losses
    coefs = cfg.experts
    moe = sum(
        coefs.aux_loss_coef * terms[f"moe_aux_{side}"] + coefs.z_loss_coef * terms[f"moe_z_{side}"] for side in sides
    )
    torch.testing.assert_close(out.loss, base + moe)
    assert out.loss > base


@pytest.mark.parametrize("family", TRANSFORMERS)
def test_post_norm_normalises_after_each_sublayer_and_changes_outputs(family):
    pre, post = build(family), build(family, norm_position="post")
    blocks = [m for m in post.modules() if hasattr(m, "pre_norm")]
    assert blocks and not any(b.pre_norm for b in blocks)
    final = post.decoder.final_norm if family == "encoder_decoder" else post.final_norm
    assert isinstance(final, torch.nn.Identity)  # a post-norm stack ends normalised
    ids = torch.randint(0, V - 2, (2, 8))
    assert not torch.allclose(pre.eval()(ids, ids).logits, post.eval()(ids, ids).logits)


@pytest.mark.parametrize("family", TRANSFORMERS)
def test_d_head_sets_the_width_of_the_model_heads(family):
    model = build(family, d_head=8)  # d_model 64, 4 heads: 16 by default
    attn = next(m for m in model.modules() if isinstance(m, Attention))
    assert attn.q.weight.shape == (4 * 8, 64) and attn.o.weight.shape == (64, 4 * 8)


@pytest.mark.parametrize("family", TRANSFORMERS)
def test_scale_attention_changes_outputs_and_defaults_to_the_familys(family):
    default = build(family)
    assert default.config.attention.scale is (family != "encoder_decoder")  # T5 does not scale; GPT does
    flipped = build(family, scale_attention=not default.config.attention.scale)
    ids = torch.randint(0, V - 2, (2, 8))
    assert not torch.allclose(default.eval()(ids, ids).logits, flipped.eval()(ids, ids).logits)


def test_unequal_depths_change_the_number_of_blocks():
    assert len(build("encoder_decoder", n_decoder_layers=3).decoder.blocks) == 3
    ar = build("ar_encdec", n_encoder_layers=3, n_decoder_layers=1)
    assert (len(ar.encoder_blocks), len(ar.decoder_blocks)) == (3, 1)
    parallel = build("parallel_encdec", n_encoder_layers=3, n_decoder_layers=1)  # the decoder starts at layer 2
    assert [layer.decoder_block is not None for layer in parallel.layers] == [False, False, True]


def test_the_parallel_decoder_cannot_be_deeper_than_its_encoder():
    with pytest.raises(ConfigError, match=r"n_decoder_layers \(3\) exceeds model.n_encoder_layers \(2\)"):
        build("parallel_encdec", n_decoder_layers=3)


def test_a_late_parallel_decoder_starts_from_the_embeddings_beside_the_last_encoder_layer():
    model = build("parallel_encdec", n_encoder_layers=3, n_decoder_layers=1).eval()
    ids, pos = torch.randint(0, V - 2, (1, 6)), torch.arange(6)
    inputs = AttentionInputs(is_causal=True)
    with torch.no_grad():
        E = enc = model.embed_tokens(ids, pos)
        for layer in model.layers:
            enc, _ = layer.encoder_block(enc, inputs)
        dec = model.decoder_in(E) + model.next_positions(pos)  # the preset adds positions 1..T
        dec, _ = model.layers[2].decoder_block(dec, enc, inputs, inputs)
        torch.testing.assert_close(model.run(ids).hidden, model.final_norm(dec))


@pytest.mark.parametrize("family", CAUSAL)
@pytest.mark.parametrize(
    "options",
    [
        dict(n_kv_heads=2, n_experts=4),
        dict(norm_position="post", n_decoder_layers=1),
        dict(d_head=8, scale_embeddings=True, embedding_norm=True, scale_output=True),
        dict(position="rope", rope_theta=500.0, n_kv_heads=2, d_head=8),
    ],
    ids=["gqa-moe", "post-unequal", "d_head-scales", "rope-gqa"],
)
def test_cached_decoding_still_equals_the_full_forward(family, options):
    if family == "decoder_only":
        options = {k: v for k, v in options.items() if k != "n_decoder_layers"}
    assert_lm_cached_equals_full(build(family, **options).eval())


def test_a_causal_lm_built_from_defaults_keeps_nanogpts_scaling():
    cfg = ModelConfig.from_dict(dict(family="decoder_only", position="learned"))
    assert cfg.attention.scale is True and cfg.output.scale is False
    assert ModelConfig().attention.scale is False and ModelConfig().output.scale is True  # T5's
    assert ModelConfig(family="rnn_seq2seq").output.scale is None  # not used: left at its default


def test_demo_lists_every_preset_with_its_own_familys_count(capsys):
    print_presets()
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(rows) == set(preset_names())
    for name in ("decoder_only-small", "ar_encdec-small", "parallel_encdec-small", "rnn_seq2seq-tiny", "t5-tiny"):
        with torch.device("meta"):
            model = build_model(preset(name))
        counts = [count_parameters(model), count_parameters(model, exclude_positions=True)]
        assert [int(re.sub(",", "", n)) for n in rows[name]] == counts
    assert rows["decoder_only-small"][1] == "16,036,800"  # seed 000's baseline
