"""What every attention kind added as one file is held to: a causal layer of it decoded over a growing cache equals
the whole sequence at once, and a model that names it in its config (model.attention.kinds) decodes greedily as
its whole forward recomputed each step and serves as generate alone."""

import torch

import encdec
from encdec.models import build_model, preset
from encdec.modules import Attention, AttentionInputs, DecodeState
from encdec.modules.attention_kinds import LayerKinds, layer_mask
from tests.interop.serving_kit import assert_served_equals_generate_alone, mixed


def assert_cached_equals_whole(kinds: LayerKinds, heads: int = 4) -> None:
    """A layer of causal `kinds` decoded a few positions at a time, each step's mask the kinds' rule of its
    positions over the written ones (1, 1, t, written), equals the whole sequence at once."""
    torch.manual_seed(0)
    attn = Attention(d_model=16, n_heads=heads, n_kv_heads=2).eval()
    x, T = torch.randn(2, 12, 16), 12
    pos = torch.arange(T)
    full = attn(x, None, AttentionInputs(mask=layer_mask(kinds, None, pos, pos, torch.float32)))
    state = DecodeState(2, T, "cpu", torch.float32)
    cache = state.new_caches(1)[0]
    steps = []
    for start, end in ((0, 5), (5, 6), (6, 7), (7, 12)):
        state.ensure(end - start)
        mask = layer_mask(kinds, None, pos[start:end], pos[:end], torch.float32)
        steps.append(attn(x[:, start:end], None, AttentionInputs(mask=mask), cache))
        state.advance(end - start)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def named_model_decodes_and_serves(kinds: dict) -> torch.nn.Module:
    """A tiny model naming `kinds` ({name: settings}); greedy decoding over its cache equals the argmax of the
    whole forward recomputed each step, and a server batch equals generate alone. Returns the model."""
    torch.manual_seed(0)
    model = build_model(preset("transformer-tiny", vocab_size=40, dropout=0.0, attention={"kinds": kinds})).eval()
    src = torch.randint(3, 40, (2, 15), generator=torch.Generator().manual_seed(1))
    out = encdec.generate(model, src, max_new_tokens=9, eos_token_id=[])
    seq = out[:, :1]
    with torch.no_grad():
        for _ in range(9):
            seq = torch.cat((seq, model(src, seq).logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, seq)
    assert_served_equals_generate_alone(model, (3, 40), mixed(12))
    return model
