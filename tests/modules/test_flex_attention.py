"""FlexAttention (modules.flex_attention) equals the dense path: every attention kind of the table, over padding,
packing and none, with grouped heads and a cap; on the CPU its eager forward (torch's unfused reference), on a GPU
its compiled kernel forward and backward (the cuda-marked tests)."""

import pytest
import torch

from encdec.errors import ConfigError
from encdec.modules import (
    Attention,
    AttentionInputs,
    RelativePositionBias,
    RotaryEmbedding,
    additive_mask,
    flex_attention,
)
from encdec.modules.attention_kinds import (
    KINDS,
    Band,
    Causal,
    Full,
    RelativeBias,
    Rope,
    TransientGlobal,
    layer_mask,
)
from encdec.modules.attention_kinds.alibi import Alibi
from encdec.modules.attention_kinds.dilated import DilatedBand
from encdec.modules.flex_attention import FlexBatch, FlexMask, uses_flex
from encdec.modules.masks import same_segment
from encdec.modules.transient_global import transient_globals

B, T, C, H = 2, 24, 32, 4


def table(bidirectional: bool) -> RelativePositionBias:
    bias = RelativePositionBias(H, bidirectional, num_buckets=8, max_distance=20)
    torch.nn.init.normal_(bias.embed.weight)
    return bias


ROTARY = RotaryEmbedding(C // H)
LAYERS = {
    "full": (Full(),),
    "causal": (Causal(),),
    "band": (Full(), Band(3)),
    "band-causal": (Causal(), Band(4, causal=True)),
    "band-split": (Full(), Band(5, split=True)),
    "relative_bias": (Full(), RelativeBias(table(True))),
    "relative_bias-causal": (Causal(), RelativeBias(table(False))),
    "rope": (Causal(), Rope(ROTARY)),
    "dilated_band": (Full(), DilatedBand(2, 3)),
    "dilated_band-causal": (Causal(), DilatedBand(3, 2, causal=True)),
    "alibi": (Full(), Alibi(H)),
    "alibi-causal": (Causal(), Alibi(H)),
    "local-t5": (Full(), Band(4), RelativeBias(table(True))),
}


def batches(kind: str):
    """A batch's allowance two ways: (what the dense mask folds (bool, broadcastable to (B, 1, T, T)), the
    FlexBatch), and the query rows that see some key (the rows compared)."""
    real = torch.arange(T)[None, :] < torch.tensor([[T], [T - 7]])  # (B, T)
    segments = torch.tensor([[1] * 10 + [2] * 14, [1] * 5 + [2] * 9 + [3] * 6 + [0] * 4])
    if kind == "none":
        return None, FlexBatch(), torch.ones(B, T, dtype=torch.bool)
    if kind == "padding":
        return real[:, None, None, :], FlexBatch(key_real=real), real
    return same_segment(segments, segments), FlexBatch(q_segments=segments, k_segments=segments), segments > 0


def attention(kinds, **options) -> Attention:
    torch.manual_seed(0)
    rotary = ROTARY if any(isinstance(kind, Rope) for kind in kinds) else None
    return Attention(C, H, rotary=rotary, **options).eval()


@pytest.mark.parametrize("batch", ["none", "padding", "packing"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_flex_equals_dense_for_every_kind_and_mask(layer, batch):
    kinds = LAYERS[layer]
    allowed, flex_batch, rows = batches(batch)
    attn = attention(kinds, n_kv_heads=2)
    x, pos = torch.randn(B, T, C), torch.arange(T)
    with torch.no_grad():
        dense = attn(x, None, AttentionInputs(mask=layer_mask(kinds, allowed, pos, pos, x.dtype), q_pos=pos, k_pos=pos))
        flex = attn(x, None, AttentionInputs(flex=FlexMask(kinds, flex_batch, T, T), q_pos=pos, k_pos=pos))
    torch.testing.assert_close(flex[rows], dense[rows], atol=1e-5, rtol=1e-5)


def test_every_kind_of_the_table_is_checked():
    """A kind added to KINDS is added here too: the rules and scores of each are checked above, the kinds with
    keys of their own in their own tests below."""
    checked = {type(kind) for kinds in LAYERS.values() for kind in kinds}
    with_keys = {name for name, kind in KINDS.items() if kind.extra_keys}
    assert {name for name, kind in KINDS.items() if kind in checked} | with_keys == set(KINDS)


def test_each_kind_s_score_is_its_bias():
    """A kind's `score` (FlexAttention's score_mod) adds what its `bias` adds, score by score."""
    pos = torch.arange(T)
    for kinds in LAYERS.values():
        for kind in kinds:
            bias = kind.bias(pos, pos)
            heads = torch.arange(H)[:, None, None]
            score = kind.score(torch.zeros(()), heads, pos[:, None], pos[None, :])
            expected = torch.zeros(()) if bias is None else bias[0]
            torch.testing.assert_close(score.expand(H, T, T), expected.expand(H, T, T))


@pytest.mark.parametrize("heads", [1, 2, 4, 6, 12, 16, 24])
def test_alibi_s_slope_by_arithmetic_is_its_table(heads):
    """ALiBi's score_mod computes each head's slope (a compiled score_mod cannot build the table inside it)."""
    torch.testing.assert_close(Alibi(heads).head_slope(torch.arange(heads)), Alibi(heads).slopes(torch.device("cpu")))


def test_a_capped_attention_caps_before_the_bias():
    kinds = (Full(), RelativeBias(table(True)))
    attn = attention(kinds, softcap=2.0)
    x, pos = torch.randn(B, T, C), torch.arange(T)
    with torch.no_grad():
        dense = attn(x, None, AttentionInputs(mask=layer_mask(kinds, None, pos, pos, x.dtype)))
        flex = attn(x, None, AttentionInputs(flex=FlexMask(kinds, FlexBatch(), T, T)))
    torch.testing.assert_close(flex, dense, atol=1e-5, rtol=1e-5)


def test_cross_attention_over_padding_and_packing():
    """A decoder's attention over the memory: its padding (B, 1, 1, S) or each target token's own example."""
    S = 17
    attn = attention((Full(),), n_kv_heads=1)
    x, memory = torch.randn(B, T, C), torch.randn(B, S, C)
    real = torch.arange(S)[None, :] < torch.tensor([[S], [S - 5]])
    tgt = torch.tensor([[1] * 10 + [2] * 14, [1] * 12 + [2] * 12])
    src = torch.tensor([[1] * 8 + [2] * 9, [1] * 6 + [2] * 7 + [0] * 4])
    cases = [(real[:, None, None, :], FlexBatch(key_real=real)), (same_segment(tgt, src), FlexBatch(None, tgt, src))]
    with torch.no_grad():
        for allowed, flex_batch in cases:
            dense = attn(x, memory, AttentionInputs(mask=additive_mask(allowed, None, x.dtype)))
            flex = attn(x, memory, AttentionInputs(flex=FlexMask((Full(),), flex_batch, T, S)))
            torch.testing.assert_close(flex, dense, atol=1e-5, rtol=1e-5)


def test_recorded_probabilities_are_the_dense_path_s():
    kinds = (Causal(), RelativeBias(table(False)))
    attn = attention(kinds)
    x, pos = torch.randn(B, T, C), torch.arange(T)
    records = []
    for inputs in (
        AttentionInputs(mask=layer_mask(kinds, None, pos, pos, x.dtype)),
        AttentionInputs(flex=FlexMask(kinds, FlexBatch(), T, T)),
    ):
        attn.recorded = []
        with torch.no_grad():
            attn(x, None, inputs)
        records.append(attn.recorded[0])
    torch.testing.assert_close(records[1], records[0], atol=1e-6, rtol=1e-5)


def transient_global_layer():
    """An attention of many kinds at once (a band, T5's bias, ALiBi, LongT5's transient-global keys), capped,
    grouped heads, over a padded batch: its dense inputs and its FlexAttention inputs."""
    torch.manual_seed(0)
    kinds = (Full(), Band(5), RelativeBias(table(True)), Alibi(H), TransientGlobal(4, table(True)))
    real = torch.arange(T)[None, :] < torch.tensor([[T], [T - 7]])
    globals_ = transient_globals(real, 4, kinds[-1].table)  # its bias by block looked up once
    pos = torch.arange(T)
    mask = layer_mask(kinds, real[:, None, None, :], pos, pos, torch.float32)  # (B, H, T, T)
    side = kinds[-1].side(real, globals_, 0, T, torch.float32)  # (B, H, T, G)
    dense = AttentionInputs(mask=torch.cat([mask, side], -1), q_pos=pos, k_pos=pos, global_keys=globals_)
    extra = kinds[-1].flex_keys(real, globals_)
    flex = AttentionInputs(flex=FlexMask(kinds, FlexBatch(key_real=real), T, T, extra), global_keys=globals_)
    attn = Attention(C, H, n_kv_heads=2, softcap=3.0, global_norm=torch.nn.LayerNorm(C)).eval()
    return attn, dense, flex, real


def test_transient_global_keys_beside_a_band_a_bias_and_alibi():
    attn, dense, flex, real = transient_global_layer()
    x = torch.randn(B, T, C)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, None, flex)[real], attn(x, None, dense)[real], atol=1e-5, rtol=1e-5)


def test_a_compiled_attention_traces_flex_attention_whole():
    """torch.compile(fullgraph=True) takes the attention with its FlexMask (block mask made inside, the mods
    reading their tables) without a graph break: what a compiled training step needs (aot_eager: the graph and
    its autograd, without inductor's CPU kernel)."""
    attn, dense, flex, real = transient_global_layer()
    x = torch.randn(B, T, C)
    compiled = torch.compile(attn, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, None, flex)[real], attn(x, None, dense)[real], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_the_compiled_kernel_cuda_takes_equals_the_dense_path_on_the_cpu(monkeypatch):
    """The kernel CUDA's eager calls take (torch.compile of flex_attention, here inductor's CPU template), over
    every kind at once: the GPU's path checked on the CPU (about 15 s of compiling)."""
    monkeypatch.setattr(flex_attention, "COMPILED_ON", {"cuda", "cpu"})
    monkeypatch.setattr(flex_attention, "COMPILED", [])
    attn, dense, flex, real = transient_global_layer()
    x = torch.randn(B, T, C)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, None, flex)[real], attn(x, None, dense)[real], atol=1e-5, rtol=1e-5)
    assert flex_attention.COMPILED  # it took the compiled kernel


def test_auto_takes_flex_on_cuda_where_a_mask_is_and_not_while_dropping():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    t5 = (Full(), RelativeBias(table(True)))
    assert uses_flex("auto", cuda, t5, masked=False, drops=False)
    assert uses_flex("auto", cuda, (Causal(),), masked=True, drops=False)
    assert not uses_flex("auto", cuda, (Causal(),), masked=False, drops=False)  # SDPA's causal kernel
    assert not uses_flex("auto", cuda, (Full(),), masked=False, drops=False)
    assert not uses_flex("auto", cuda, t5, masked=False, drops=True)
    assert not uses_flex("auto", cpu, t5, masked=True, drops=False)
    assert uses_flex("flex", cpu, (Full(),), masked=False, drops=False)
    assert not uses_flex("dense", cuda, t5, masked=True, drops=False)
    with pytest.raises(ConfigError, match="cannot drop attention probabilities"):
        uses_flex("flex", cpu, t5, masked=False, drops=True)
    with pytest.raises(ConfigError, match="no backward on cpu"):
        uses_flex("flex", cpu, t5, masked=False, drops=False, backward=True)
    assert uses_flex("flex", cuda, t5, masked=False, drops=False, backward=True)
