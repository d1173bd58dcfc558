"""The dilated band (modules/attention_kinds/dilated.py), added as one file and one table entry: its attention
equals a dense softmax under its formula written out, by chunks as whole, in FlexAttention, inside the encoder,
and, causal, cached decoding equals recomputing the whole sequence; a config names it (model.attention.kinds) and
a misnamed or missettled one is one sentence."""

import math

import pytest
import torch

import encdec
import encdec.interop.to_hf
from encdec.errors import ConfigError
from encdec.models import ModelConfig, build_model, preset
from encdec.modules import Attention, AttentionInputs
from encdec.modules.attention_kinds import KINDS, Causal, Full, layer_band, layer_mask, mask_mod
from encdec.modules.attention_kinds.dilated import DilatedBand
from encdec.modules.chunked_attention import LazyMask
from tests.modules.kinds_kit import assert_cached_equals_whole, named_model_decodes_and_serves


def formula(T: int, width: int, dilation: int, causal: bool) -> torch.Tensor:
    """(T, T) bool, written out entry by entry: query i sees key j on a step of `dilation` within `width` steps."""
    allowed = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(T):
            steps, on_step = divmod(i - j, dilation)
            if on_step == 0:
                allowed[i, j] = 0 <= steps < width if causal else abs(i - j) <= width * dilation
    return allowed


def dense_reference(attn: Attention, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(D), blocked where not allowed) v, heads by hand."""
    B, T, _ = x.shape
    H, D = attn.n_heads, attn.d_head
    q, k, v = (layer(x).view(B, T, H, D).transpose(1, 2) for layer in (attn.q, attn.k, attn.v))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~allowed, float("-inf"))
    return attn.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D))


def test_the_table_names_it():
    assert KINDS["dilated_band"] is DilatedBand


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("width, dilation", [(2, 3), (3, 2), (1, 4)])
def test_its_attention_equals_the_formula_whole_and_by_chunks(width, dilation, causal, monkeypatch):
    from encdec.modules import chunked_attention

    torch.manual_seed(0)
    attn = Attention(d_model=16, n_heads=2).eval()
    x, T = torch.randn(2, 37, 16), 37
    kinds = (Causal() if causal else Full(), DilatedBand(width, dilation, causal))
    pos = torch.arange(T)
    want = dense_reference(attn, x, formula(T, width, dilation, causal))
    whole = attn(x, None, AttentionInputs(mask=layer_mask(kinds, None, pos, pos, torch.float32)))
    torch.testing.assert_close(whole, want, atol=1e-5, rtol=1e-5)
    assert layer_band(kinds) == max(abs(i - j) for i, j in formula(T, width, dilation, causal).nonzero().tolist())

    def rows(t0, t1, k0, k1):
        return layer_mask(kinds, None, pos[t0:t1], pos[k0:k1], torch.float32)

    monkeypatch.setattr(chunked_attention, "CHUNK_SCORES", 2 * 2 * 30)  # a few rows a chunk, their band's keys
    chunked = attn(x, None, AttentionInputs(mask=LazyMask(rows, T, layer_band(kinds))))
    torch.testing.assert_close(chunked, want, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_reads_the_same_rule():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 32, 8) for _ in range(3))
    allowed = formula(32, 3, 2, causal=False)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    block_mask = flex.create_block_mask(mask_mod((Full(), DilatedBand(3, 2))), None, None, 32, 32, device="cpu")
    torch.testing.assert_close(flex.flex_attention(q, k, v, block_mask=block_mask), want, atol=1e-5, rtol=1e-5)


def test_cached_decoding_equals_recomputing_the_whole_sequence():
    """A causal dilated band decoded over a growing cache equals the whole sequence at once (kinds_kit)."""
    assert_cached_equals_whole((Causal(), DilatedBand(3, 2, causal=True)))


DILATED = {"attention": {"kinds": {"dilated_band": {"width": 2, "dilation": 3}}}}  # by its name in KINDS


def test_an_encoder_of_dilated_layers_attends_the_same_by_chunks_and_whole():
    """Named in the config, the band reaches the encoder's own masks and its long-input path (by blocks of its
    band: it reads k - q alone), at every real token (a padding token whose band holds no real key sees none: its
    output, never read, is the mean of the values it reads, not of all)."""
    cfg = ModelConfig.from_dict(dict(vocab_size=40, d_model=16, d_ff=32, n_heads=2, n_encoder_layers=2, **DILATED))
    model = build_model(cfg).eval()
    src = torch.randint(3, 40, (2, 50), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 50, dtype=torch.bool)
    mask[1, 41:] = False
    with torch.no_grad():
        whole = model.encode(src, mask).hidden
        model.encoder.long_scores = 0  # every layer by blocks
        chunked = model.encode(src, mask).hidden
    torch.testing.assert_close(chunked[mask], whole[mask], atol=1e-5, rtol=1e-5)


def test_a_config_naming_it_adds_it_to_every_layer_and_decoding_equals_recomputation():
    """model.attention.kinds adds the kind to each stack's layers (causal in the decoder); greedy decoding over the
    cache equals the argmax of the whole forward recomputed each step, and a server batch equals generate alone."""
    model = named_model_decodes_and_serves(DILATED["attention"]["kinds"])
    assert model.encoder.self_kinds(1)[-1] == DilatedBand(2, 3)
    assert model.decoder.self_kinds(1)[-1] == DilatedBand(2, 3, causal=True)


@pytest.mark.parametrize(
    "kinds, said",
    [
        ({"dilatd_band": {}}, "model.attention.kinds names no kind 'dilatd_band'; kinds: "),
        ({"dilated_band": {"width": 0, "dilation": 2}}, "model.attention.kinds.dilated_band.width must be "),
        ({"dilated_band": {"width": 2}}, "model.attention.kinds.dilated_band.dilation is missing"),
        (
            {"dilated_band": {"width": 2, "dilation": 2, "step": 1}},
            "unknown key model.attention.kinds.dilated_band.step",
        ),
        ({"rope": {}}, "model.attention.kinds.rope is not a kind a config names"),
    ],
)
def test_a_kind_misnamed_or_missettled_is_one_sentence(kinds, said):
    with pytest.raises(ConfigError) as refused:
        build_model(preset("transformer-tiny", vocab_size=40, attention={"kinds": kinds}))
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)


def test_an_export_refuses_a_named_kind():
    cfg = preset("t5-tiny", vocab_size=40)
    assert encdec.interop.to_hf.hf_layout(cfg) == "t5"
    with pytest.raises(ConfigError, match=r"^model.attention.kinds \(dilated_band\) has no Hugging Face family"):
        encdec.interop.to_hf.hf_layout(cfg.updated(**DILATED))
