"""ALiBi (modules/attention_kinds/alibi.py), added as one file and one table entry: its slopes are BLOOM's
(transformers), causal attention under it equals attention under BLOOM's alibi tensor, by chunks as whole, in
FlexAttention, cached decoding equals recomputation, and a config naming it builds a model that uses it."""

import pytest
import torch

from encdec.errors import ConfigError
from encdec.models import build_model, preset
from encdec.modules import Attention, AttentionInputs
from encdec.modules.attention_kinds import KINDS, Causal, Full, layer_mask, score_mod
from encdec.modules.attention_kinds.alibi import Alibi, alibi_slopes
from encdec.modules.chunked_attention import LazyMask
from tests.modules.kinds_kit import assert_cached_equals_whole, named_model_decodes_and_serves

bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")


def test_the_table_names_it():
    assert KINDS["alibi"] is Alibi


@pytest.mark.parametrize("heads", [1, 2, 5, 8, 12, 16])
def test_its_slopes_are_bloom_s(heads):
    torch.testing.assert_close(torch.tensor(alibi_slopes(heads)), bloom._get_alibi_slopes(heads, "cpu"))


def bloom_attention(attn: Attention, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Causal attention with BLOOM's alibi tensor (slope x the key's position among the row's real tokens, which
    equals -slope x (q - k) up to a constant of each query's row) added to the scores, heads by hand."""
    B, T, _ = x.shape
    H, D = attn.n_heads, attn.d_head
    q, k, v = (layer(x).view(B, T, H, D).transpose(1, 2) for layer in (attn.q, attn.k, attn.v))
    alibi = bloom.build_alibi_tensor(real.long(), H, torch.float32).view(B, H, 1, T)
    allowed = torch.ones(T, T, dtype=torch.bool).tril() & real[:, None, None, :]
    scores = (q @ k.transpose(-1, -2) / D**0.5 + alibi).masked_fill(~allowed, float("-inf"))
    return attn.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D))


def test_causal_attention_under_it_equals_bloom_s_whole_and_by_chunks(monkeypatch):
    from encdec.modules import chunked_attention

    torch.manual_seed(0)
    attn = Attention(d_model=24, n_heads=6).eval()
    x, T = torch.randn(2, 29, 24), 29
    real = torch.ones(2, T, dtype=torch.bool)  # right padding: BLOOM counts positions among real tokens
    real[1, 20:] = False
    kinds, pos = (Causal(), Alibi(6)), torch.arange(T)
    allowed = real[:, None, None, :]
    want = bloom_attention(attn, x, real)
    whole = attn(x, None, AttentionInputs(mask=layer_mask(kinds, allowed, pos, pos, torch.float32)))
    torch.testing.assert_close(whole[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(whole[1, :20], want[1, :20], atol=1e-5, rtol=1e-5)

    def rows(t0, t1, k0, k1):
        return layer_mask(kinds, allowed[..., k0:k1], pos[t0:t1], pos[k0:k1], torch.float32)

    monkeypatch.setattr(chunked_attention, "CHUNK_SCORES", 6 * 2 * 40)  # a few rows a chunk
    chunked = attn(x, None, AttentionInputs(mask=LazyMask(rows, T, None)))
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_reads_the_same_term():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 32, 8) for _ in range(3))
    pos = torch.arange(32)
    bias = layer_mask((Full(), Alibi(4)), None, pos, pos, torch.float32)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    got = flex.flex_attention(q, k, v, score_mod=score_mod((Full(), Alibi(4))))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_cached_decoding_equals_recomputing_the_whole_sequence():
    assert_cached_equals_whole((Causal(), Alibi(4)))


def test_a_config_naming_it_decodes_as_its_whole_forward_and_serves_as_generate():
    """model.attention.kinds: {alibi: {}} puts it in every layer of both stacks; greedy decoding over the cache is
    the whole forward's argmax, and a server batch equals generate alone (kinds_kit); settings are refused."""
    model = named_model_decodes_and_serves({"alibi": {}})
    assert model.encoder.self_kinds(0)[-1] == Alibi(model.config.n_heads) == model.decoder.self_kinds(1)[-1]
    with pytest.raises(ConfigError, match=r"^model.attention.kinds.alibi takes no settings .*, got heads$"):
        build_model(preset("transformer-tiny", vocab_size=40, attention={"kinds": {"alibi": {"heads": 2}}}))
