"""Attention kinds (modules.attention_kinds): each kind's rule is the mask it stands for, a layer's kinds fold into
one mask, and the dense, chunked and FlexAttention paths read the same declarations to the same result."""

from functools import partial

import pytest
import torch

from encdec.models import ModelConfig, build_model, count_parameters, count_parameters_of
from encdec.modules import Attention, AttentionInputs, RelativePositionBias, additive_mask, causal_mask, within_window
from encdec.modules.attention_kinds import (
    KINDS,
    Band,
    Causal,
    Full,
    RelativeBias,
    Rope,
    TransientGlobal,
    layer_band,
    layer_mask,
    layer_rule,
    mask_mod,
    only_causal,
    score_mod,
)
from encdec.modules.chunked_attention import LazyMask

TINY = dict(vocab_size=40, d_model=16, d_ff=32, n_heads=2, n_encoder_layers=3, n_decoder_layers=2, d_head=8)


@pytest.mark.parametrize("causal, split", [(True, False), (False, False), (False, True)])
def test_a_band_is_the_sliding_window_it_stands_for(causal, split):
    pos = torch.arange(13)
    for width in (1, 2, 5):
        kinds = (Causal() if causal else Full(), Band(width, causal, split))
        want = within_window(pos, pos, width, causal, split)
        if causal:
            want = want & causal_mask(13, 13)[None, None]
        assert torch.equal(layer_rule(kinds, pos, pos), want)
        assert layer_band(kinds) == width


def test_a_layer_mask_is_padding_and_rules_with_the_bias_added():
    table = RelativePositionBias(n_heads=2, bidirectional=False, num_buckets=8, max_distance=16)
    pos, padding = torch.arange(6), torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    kinds = (Causal(), RelativeBias(table))
    want = additive_mask(padding & causal_mask(6, 6), table(pos, pos), torch.float32)
    torch.testing.assert_close(layer_mask(kinds, padding, pos, pos, torch.float32), want, rtol=0, atol=0)
    assert layer_mask((Full(),), None, pos, pos, torch.float32) is None  # nothing masked, nothing made
    assert RelativeBias(table) == RelativeBias(table) and RelativeBias(table) != RelativeBias(
        RelativePositionBias(2, False, 8, 16)
    )  # layers reading one table share one mask; UMT5's own tables do not


def test_only_causality_takes_the_mask_free_path():
    rope = Rope(torch.nn.Identity())
    assert only_causal((Causal(), rope)) and not only_causal((Causal(), Band(4, causal=True), rope))
    assert not only_causal((Full(),)) and not only_causal((Causal(), RelativeBias(torch.nn.Identity())))


def banded_attention_inputs(kinds, S: int, by_chunks: bool) -> AttentionInputs:
    pos = torch.arange(S)
    if not by_chunks:
        return AttentionInputs(mask=layer_mask(kinds, None, pos, pos, torch.float32))

    def rows(t0, t1, k0, k1):
        return layer_mask(kinds, None, pos[t0:t1], pos[k0:k1], torch.float32)

    return AttentionInputs(mask=LazyMask(rows, S, layer_band(kinds)))


def test_the_chunked_path_reads_the_kinds_band_and_rules(monkeypatch):
    """A long input's chunks of query rows read only the keys within the kinds' band, each chunk's mask made from
    the same rules: the same output as the whole mask."""
    from encdec.modules import chunked_attention

    monkeypatch.setattr(chunked_attention, "CHUNK_SCORES", 2 * 4 * 20)  # chunks of a few rows
    torch.manual_seed(0)
    attn = Attention(d_model=16, n_heads=2).eval()
    x = torch.randn(2, 40, 16)
    kinds = (Full(), Band(3))
    whole = attn(x, None, banded_attention_inputs(kinds, 40, by_chunks=False))
    chunked = attn(x, None, banded_attention_inputs(kinds, 40, by_chunks=True))
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("kinds", [(Causal(),), (Full(), Band(3)), (Causal(), Band(4, causal=True))])
def test_flex_attention_s_block_mask_from_the_kinds_equals_the_dense_mask(kinds):
    """FlexAttention (forward, on the CPU) with the block mask of the kinds' mask_mod equals SDPA under their
    dense mask: a fused path reads the declarations as they are."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 32, 8) for _ in range(3))
    pos = torch.arange(32)
    dense = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=layer_mask(kinds, None, pos, pos, torch.float32)
    )
    block_mask = flex.create_block_mask(mask_mod(kinds), None, None, 32, 32, device="cpu")
    torch.testing.assert_close(flex.flex_attention(q, k, v, block_mask=block_mask), dense, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("bidirectional", [True, False])
def test_flex_attention_s_score_mod_from_the_kinds_adds_the_relative_bias(bidirectional):
    """T5's bias as a score_mod (each kind's `score`) gives what its dense bias gives."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch.manual_seed(0)
    table = RelativePositionBias(n_heads=2, bidirectional=bidirectional, num_buckets=8, max_distance=20)
    torch.nn.init.normal_(table.embed.weight)
    kinds = (Full() if bidirectional else Causal(), RelativeBias(table))
    q, k, v = (torch.randn(1, 2, 32, 8) for _ in range(3))
    pos = torch.arange(32)
    with torch.no_grad():
        dense = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=layer_mask(kinds, None, pos, pos, torch.float32)
        )
        block_mask = flex.create_block_mask(mask_mod(kinds), None, None, 32, 32, device="cpu")
        fused = flex.flex_attention(q, k, v, score_mod=score_mod(kinds), block_mask=block_mask)
    torch.testing.assert_close(fused, dense, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"relative_bias_per_layer": True},
        {"encoder_attention": "transient_global", "local_radius": 3, "global_block_size": 4},
        {"position": "rope", "sliding_window": 3},
    ],
    ids=["t5", "umt5", "longt5", "gemma-window"],
)
def test_a_stack_declares_its_layers_kinds(options):
    """Each layer's kinds are what the config says, and the kinds' own parameters are those of the tables they
    hold (T5's one table counted once, UMT5's each)."""
    model = build_model(ModelConfig.from_dict(dict(family="encoder_decoder", **TINY, **options)))
    encoder, decoder = model.encoder, model.decoder
    kinds = [encoder.self_kinds(i) for i in range(3)]
    if "sliding_window" in options:
        assert kinds[0][:2] == (Full(), Band(3)) and kinds[2] == kinds[0]  # layers 0 and 2 slide (global_every 2)
        assert Band(3) not in kinds[1] and isinstance(kinds[1][-1], Rope)
        assert decoder.self_kinds(0)[:2] == (Causal(), Band(3, causal=True))
        return
    assert isinstance(kinds[0][0], Full) and isinstance(decoder.self_kinds(0)[0], Causal)
    tables = {id(kind.table): kind.parameters() for layer in kinds for kind in layer if hasattr(kind, "table")}
    expected = sum(p.numel() for name, p in encoder.named_parameters() if "bias" in name.split(".")[0])
    assert sum(tables.values()) == expected
    decoder_kinds = [decoder.self_kinds(i) for i in range(2)]
    tables.update(
        {id(kind.table): kind.parameters() for layer in decoder_kinds for kind in layer if hasattr(kind, "table")}
    )
    assert sum(tables.values()) == count_parameters_of(model.config).positions  # the config's count agrees
    if options.get("relative_bias_per_layer"):
        assert kinds[0] != kinds[1]  # a table each
    else:
        assert kinds[0] == kinds[1] == kinds[2]  # one table: one mask for all
    if "encoder_attention" in options:
        assert Band(3) in kinds[0] and isinstance(kinds[0][-1], TransientGlobal)
        assert encoder.band(0) == 3
    assert count_parameters(model) > 0


def test_every_kind_is_in_the_table():
    assert set(KINDS.values()) >= {Full, Causal, Band, RelativeBias, Rope, TransientGlobal}


def test_the_encoder_s_masks_are_the_kinds_masks_whole_or_by_chunks():
    """The encoder's mask of a layer (SelfMasks.rows) is layer_mask of the layer's kinds over the padding."""
    from encdec.models.encoder import SelfMasks

    model = build_model(
        ModelConfig.from_dict(dict(family="encoder_decoder", **TINY, encoder_attention="local", local_radius=2))
    )
    src_mask = torch.tensor([[True] * 9, [True] * 6 + [False] * 3])
    x = torch.zeros(2, 9, 16)
    row = torch.arange(9)
    masks = SelfMasks(model.encoder, src_mask, None, row, row, x)
    kinds = model.encoder.self_kinds(1)
    want = layer_mask(kinds, src_mask[:, None, None, :], row, row, torch.float32)
    torch.testing.assert_close(masks.rows(1, 0, 9, 0, 9), want, rtol=0, atol=0)
    torch.testing.assert_close(
        masks.rows(1, 3, 5, 1, 7),
        partial(layer_mask, kinds)(src_mask[:, None, None, 1:7], row[3:5], row[1:7], torch.float32),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize(
    "options",
    [{}, {"relative_bias_per_layer": True}, {"position": "rope", "sliding_window": 3}],
    ids=["t5", "umt5", "gemma-window"],
)
def test_a_decode_step_s_masks_are_the_decoder_kinds_masks(options):
    """What a decode state builds for a step (bias rows, a window) from the decoder's kinds (Stack.layer_kinds,
    DecodeState.attend_as) is layer_mask of those kinds over the written keys."""
    from encdec.modules.blocks import for_layer

    model = build_model(ModelConfig.from_dict(dict(family="encoder_decoder", **TINY, **options))).eval()
    state = model.start(torch.randint(3, 40, (2, 7)), None, max_new_tokens=8)
    for _ in range(5):
        model.step(torch.randint(3, 40, (2, 1)), state)
    pos = state.positions(1)
    inputs = state.self_attentions(1, pos)
    for layer, kinds in enumerate(model.decoder.layer_kinds()):
        got = for_layer(inputs, layer).mask
        want = layer_mask(kinds, None, pos, torch.arange(state.columns + 1), torch.float32)
        if got is None:  # nothing to mask or add
            assert not want.any()
        else:
            torch.testing.assert_close(got.expand_as(want), want, rtol=0, atol=0)


@pytest.mark.parametrize(
    "options",
    [{}, {"relative_bias_per_layer": True}, {"position": "rope", "sliding_window": 3}],
    ids=["t5", "umt5", "gemma-window"],
)
def test_a_server_batch_s_and_a_fixed_shape_step_s_masks_are_the_decoder_kinds_masks(options):
    """The same for rows each at a column of its own (a server's batch: rows joined 3 steps apart) and for a
    fixed-shape state (compiled steps: every one of its L columns, those not written blocked by Causal's rule)."""
    from encdec.modules import DecodeState, RunningBatch
    from encdec.modules.blocks import for_layer

    model = build_model(ModelConfig.from_dict(dict(family="encoder_decoder", **TINY, **options))).eval()
    batch = RunningBatch("cpu", torch.float32)
    batch.join(model.start(torch.randint(3, 40, (2, 7)), None, max_new_tokens=8), [1, 1])
    for _ in range(3):
        model.step(torch.randint(3, 40, (2, 1)), batch)
    batch.join(model.start(torch.randint(3, 40, (1, 5)), None, max_new_tokens=8), [1])
    fixed = DecodeState.fixed(model.start(torch.randint(3, 40, (1, 7)), None, max_new_tokens=8), 9, 7)
    fixed.advance(5)
    for state, rows in ((batch, [3, 3, 0]), (fixed, [5])):
        inputs = state.self_attentions(1, state.positions(1))
        keys = torch.arange(9 if state.static else 4)
        for layer, kinds in enumerate(model.decoder.layer_kinds()):
            got = for_layer(inputs, layer).mask
            for row, column in enumerate(rows):
                want = layer_mask(kinds, None, torch.tensor([column]), keys, torch.float32)  # (1, H or 1, 1, W)
                torch.testing.assert_close(got[row : row + 1].expand_as(want), want, rtol=0, atol=0)
