"""The fit check counts the encoder's scores by the path each layer takes: a layer that attends by chunks of
queries (a long input, LongT5's local band, a sliding window) holds one chunk's scores, not the whole square,
so a long input that fits is not refused; and what it counts is what a forward pass computes."""

import pytest
import torch

from encdec.errors import ConfigError
from encdec.generation import GenerationConfig
from encdec.generation.decode_memory import check_generation_fits, generation_bytes
from encdec.models import build_model, preset
from encdec.modules import attention, blocked_band

V = 97
ENCODERS = {
    "full": {},
    "local": dict(encoder_attention="local", local_radius=8),
    "transient_global": dict(encoder_attention="transient_global", local_radius=8, global_block_size=4),
    "sliding": dict(sliding_window=6, rope_cross="none", position="rope"),
}


def computed_scores(model, S: int, monkeypatch) -> int:
    """The most numbers of scores one call of the encoder's attention (or one group of a band's blocks) computed,
    encoding one input of S tokens."""
    peak = [0]
    real_attend, real_group = attention.attend, blocked_band._group

    def counted(q, k, *args, **kwargs):
        peak[0] = max(peak[0], q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2])
        return real_attend(q, k, *args, **kwargs)

    def grouped(q_rows, n0, n1, *, k, T, blocks, **kwargs):
        size = blocks.size
        peak[0] = max(peak[0], q_rows.shape[0] * q_rows.shape[1] * (n1 - n0) * size * (3 * size + k.shape[2] - T))
        return real_group(q_rows, n0, n1, k=k, T=T, blocks=blocks, **kwargs)

    monkeypatch.setattr(attention, "attend", counted)
    monkeypatch.setattr(blocked_band, "_group", grouped)
    with torch.no_grad():
        model.encode(torch.randint(3, V, (1, S), generator=torch.Generator().manual_seed(0)))
    return peak[0]


@pytest.mark.parametrize("long_scores", [1 << 27, 0], ids=["whole-unless-banded", "by-chunks"])
@pytest.mark.parametrize("kind", ENCODERS)
def test_the_encoder_s_score_count_is_what_its_forward_pass_computes(kind, long_scores, monkeypatch):
    base = "rot5-tiny" if kind == "sliding" else "t5-tiny"
    model = build_model(preset(base, vocab_size=V, dropout=0.0, **ENCODERS[kind])).eval()
    model.encoder.long_scores = long_scores
    for S in (40, 300):
        assert model.attention_scores(1, S) == computed_scores(model, S, monkeypatch), (kind, S)


def t5_small(**overrides):
    with torch.device("meta"):
        return build_model(preset("t5-small", vocab_size=32128, **overrides))


@pytest.mark.parametrize("kind", ["full", "local"])
def test_a_long_input_s_estimate_grows_linearly_and_one_that_fits_is_not_refused(kind, monkeypatch):
    """The issue's case: a 106k-token LongT5 input was refused as needing 167.5 GiB, the figure of every score at
    once, though the path it takes by chunks is linear in the input."""
    import encdec.generation.decode_memory as decode_memory

    model = t5_small(**({"encoder_attention": "local", "local_radius": 127} if kind == "local" else {}))
    cfg = GenerationConfig(max_new_tokens=32)
    encoder = [generation_bytes(model, cfg, 1, S, 1)["encoder"] for S in (53_000, 106_000)]
    assert 1.9 < encoder[1] / encoder[0] < 2.1
    assert encoder[1] < 2**30
    monkeypatch.setattr(decode_memory, "free_bytes", lambda device: 8 << 30)
    check_generation_fits(model, cfg, 1, 106_000, 1, torch.device("cpu"))  # ~3.3 GiB, most of it cross-attention
    monkeypatch.setattr(decode_memory, "free_bytes", lambda device: 1 << 30)
    with pytest.raises(ConfigError, match=r"needs ~3\.[23] GiB \(2\.4 GiB of it cross-attention caches\)"):
        check_generation_fits(model, cfg, 1, 106_000, 1, torch.device("cpu"))
