"""Longformer's global tokens beside a band (modules/global_tokens.py, attention_kinds/local_global.py): an encoder
layer of encoder_attention local_global equals transformers' Longformer self-attention (LED's LEDEncoderAttention,
the reference) on a padded batch of lengths that are not multiples of its window, with any global tokens, whole
and by chunks of its band; and the global tokens' rule picks each row's first real token."""

import pytest
import torch

from encdec.models import ModelConfig
from encdec.models.encoder import Encoder, SelfMasks
from encdec.modules.attention_kinds import KINDS, Band, Full, GlobalTokenKeys
from encdec.modules.global_tokens import from_mask, global_token_rows

transformers = pytest.importorskip("transformers")
led = pytest.importorskip("transformers.models.led.modeling_led")

WINDOW, D, HEADS = 4, 16, 2  # transformers' attention_window: 2 keys each side


@pytest.fixture
def pair():
    """transformers' attention (random weights) and an encoder of ours of one layer whose attention holds them."""
    torch.manual_seed(0)
    config = transformers.LEDConfig(
        d_model=D, encoder_attention_heads=HEADS, encoder_layers=1, attention_window=[WINDOW], attention_dropout=0.0
    )
    theirs = led.LEDEncoderAttention(config, 0).eval()
    cfg = ModelConfig.from_dict(dict(
        vocab_size=8, d_model=D, n_heads=HEADS, n_encoder_layers=1, bias=True, scale_attention=True, dropout=0.0,
        position="learned", encoder_attention="local_global", local_radius=WINDOW // 2, global_tokens="first",
    ))  # fmt: skip
    ours = Encoder(cfg, torch.nn.Embedding(8, D), None).eval()
    attention, longformer = ours.blocks[0].self_attn, theirs.longformer_self_attn
    pairs = {"q": "query", "k": "key", "v": "value", "global_q": "query_global", "global_k": "key_global"}
    pairs |= {"global_v": "value_global"}
    with torch.no_grad():
        for mine, its in pairs.items():
            getattr(attention, mine).load_state_dict(getattr(longformer, its).state_dict())
        attention.o.load_state_dict(theirs.output.state_dict())
    return theirs, ours


def reference(theirs, x: torch.Tensor, real: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """transformers' output for x (B, S, C): its input padded to a multiple of the window first, as LEDEncoder pads
    it, and its attention mask merged 0 / 1 / 2 (padding, local, global), then cut back."""
    B, S, _ = x.shape
    pad = -S % WINDOW
    merged = torch.nn.functional.pad((real.long() * (chosen.long() + 1)), (0, pad))
    mask = led._prepare_4d_attention_mask_inverted(merged, x.dtype)[:, 0, 0, :]
    padded = torch.nn.functional.pad(x, (0, 0, 0, pad))
    out = theirs(padded, mask, mask < 0, mask > 0, bool((mask > 0).any()))[0]
    return out[:, :S]


def ours_out(ours, x, real, chosen, by_chunks: bool) -> torch.Tensor:
    S = x.shape[1]
    row = torch.arange(S)
    masks = SelfMasks(ours, real, None, row, row, x)
    masks.tokens = from_mask(chosen, real)
    ours.long_scores = 1 if by_chunks else 1 << 40
    inputs = ours.attention_inputs(masks)[0]
    assert (type(inputs.mask).__name__ == "LazyMask") == by_chunks
    return ours.blocks[0].self_attn(x, None, inputs)


@pytest.mark.parametrize("by_chunks", [False, True], ids=["whole", "by-chunks"])
@pytest.mark.parametrize("globals_", ["first", "several", "none-in-a-row", "none-at-all"])
def test_a_layer_equals_transformers_longformer_attention_on_a_padded_batch(pair, by_chunks, globals_, monkeypatch):
    from encdec.modules import chunked_attention

    theirs, ours = pair
    lengths, S = (13, 9, 3), 13  # none a multiple of the window
    real = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]
    chosen = torch.zeros_like(real)
    chosen[:, 0] = True
    if globals_ == "several":
        chosen[0, [4, 11]] = chosen[1, 7] = True
    if globals_ == "none-in-a-row":
        chosen[2, 0] = False
    if globals_ == "none-at-all":  # the band alone (transformers' LED without a global_attention_mask)
        chosen[:] = False
    x = torch.randn(3, S, D)
    monkeypatch.setattr(chunked_attention, "CHUNK_SCORES", 3 * HEADS * 12)  # a few rows a chunk
    got, want = ours_out(ours, x, real, chosen, by_chunks), reference(theirs, x, real, chosen)
    gap = ((got - want).abs() * real[:, :, None]).max()  # padding rows are no output of either
    assert gap < 1e-5


def test_the_rule_first_picks_each_row_s_first_real_token_and_the_kinds_declare_it(pair):
    real = torch.tensor([[True, True, False], [False, True, True], [False, False, False]])  # right, left, empty
    rows = global_token_rows(real, "first")
    assert rows.index.tolist() == [[0], [1], [0]] and rows.present.tolist() == [[True], [True], [False]]
    assert global_token_rows(real, "none") is None
    assert pair[1].self_kinds(0) == (Full(), Band(WINDOW // 2), GlobalTokenKeys())
    assert KINDS["global_tokens"] is GlobalTokenKeys


def test_its_parameters_are_counted_and_a_packed_batch_is_refused(pair):
    from encdec.errors import ConfigError
    from encdec.models.parameter_count import count_parameters_of
    from encdec.modules import Packing

    cfg = ModelConfig.from_dict(dict(
        vocab_size=8, d_model=D, n_heads=HEADS, n_encoder_layers=1, bias=True,
        encoder_attention="local_global", local_radius=2, global_tokens="first",
    ))  # fmt: skip
    from encdec.models import build_model

    model = build_model(cfg)
    assert count_parameters_of(cfg).total == sum(p.numel() for p in model.parameters())
    assert not model.capabilities.packs_sources
    own_table = cfg.updated(position="learned", max_positions=8, encoder={"max_positions": 32})
    assert type(model).position_limits(own_table) == (32, 8)  # the source is read by the encoder's table
    with pytest.raises(ConfigError, match="^an encoder with global tokens cannot read a packed batch"):
        SelfMasks(model.encoder, None, Packing.__new__(Packing), torch.arange(3), torch.arange(3), torch.zeros(1, 3, D))
    with pytest.raises(
        ConfigError, match="^model.attention.global_tokens acts only with model.attention.encoder local_global"
    ):
        build_model(ModelConfig.from_dict(dict(vocab_size=8, d_model=D, n_heads=HEADS, global_tokens="first")))


def test_with_the_first_token_global_a_server_batch_equals_generate_alone():
    """Rows of one server batch (padded, not packed: the global tokens are each row's) each generate as alone."""
    import encdec
    from tests.interop.serving_kit import assert_served_equals_generate_alone, mixed

    torch.manual_seed(0)
    settings = dict(encoder_attention="local_global", local_radius=2, global_tokens="first", dropout=0.0)
    model = encdec.build_model(encdec.preset("transformer-tiny", vocab_size=64, **settings)).eval()
    assert_served_equals_generate_alone(model, (3, 64), mixed(12))


def test_long_inputs_attend_by_chunks_of_the_band_memory_not_growing_with_the_input(pair):
    """From eight bands' width on, a layer's scores are one chunk's, whatever the length (the global tokens' G
    extra keys a query and G queries over every key aside: linear in the input)."""
    ours = pair[1]
    ours.long_scores = 1 << 27
    assert ours.by_chunks(HEADS, 4096, ours.band(0), 1)
    assert ours.score_numbers(1, 4096) == ours.score_numbers(1, 1 << 16) < HEADS * 4096 * 4097
