"""The encoder's attention by chunks of queries (modules.chunked_attention), which a long input takes, computes
what the whole-score path computes: logits, loss and every parameter's gradient within 1e-5 in float32, for
each position scheme (T5's relative bias, UMT5's per layer, RoPE, sinusoidal, learned) and mask (padding,
packing, none), Gemma's windows, LongT5's local and transient-global attention and T5Gemma 2's layout; a band
whose kinds allow it is attended by blocks (modules.blocked_band), and computes the same; and what either keeps
for the backward pass grows linearly with the input, where the whole scores grow with its square."""

import sys

import pytest
import torch
from model_kit import GEMMA_BLOCKS
from work_kit import run_bounded

from encdec.models import build_model, preset
from encdec.modules import blocked_band, chunked_attention

V = 97
GEMMA = dict(GEMMA_BLOCKS, attention_softcap=2.0, sliding_window=5)
MODELS = {  # name -> (preset, overrides)
    "t5": ("t5-tiny", {}),
    "umt5": ("t5-v1.1-tiny", dict(relative_bias_per_layer=True)),
    "rot5": ("rot5-tiny", {}),
    "transformer": ("transformer-tiny", {}),
    "learned": ("transformer-tiny", dict(position="learned", norm_position="pre")),
    "gemma": ("rot5-tiny", GEMMA),
    "gemma2": (
        "rot5-tiny",
        dict(GEMMA, attention_softcap=None, sliding_window_layout="split", qk_norm=True, merged_cross_attention=True),
    ),
    "longt5-local": ("t5-tiny", dict(encoder_attention="local", local_radius=4)),
    "longt5-tglobal": ("t5-tiny", dict(encoder_attention="transient_global", local_radius=4, global_block_size=3)),
}


def model(name: str):
    preset_name, overrides = MODELS[name]
    torch.manual_seed(0)
    cfg = preset(preset_name, vocab_size=V, max_positions=64, dropout=0.0, **overrides)
    return build_model(cfg).train()


def batch(packed: bool):
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, V - 1, (2, 40), generator=g)
    tgt = torch.randint(3, V - 1, (2, 9), generator=g)
    extra = {"src_mask": torch.arange(40)[None, :] < torch.tensor([[40], [27]])}
    if packed:  # two examples in each row, the second row's end padding
        src_segments = torch.tensor([[1] * 22 + [2] * 18, [1] * 15 + [2] * 20 + [0] * 5])
        tgt_segments = torch.tensor([[1] * 5 + [2] * 4, [1] * 4 + [2] * 5])

        def positions(segments):
            starts = torch.cat([torch.zeros(2, 1, dtype=torch.long), (segments[:, 1:] != segments[:, :-1]).long()], 1)
            index = torch.arange(segments.shape[1]).expand_as(segments)
            first = torch.cummax(torch.where(starts.bool(), index, 0), dim=1).values
            return index - first

        extra = dict(
            src_segments=src_segments,
            tgt_segments=tgt_segments,
            src_positions=positions(src_segments),
            tgt_positions=positions(tgt_segments),
        )
    return src, tgt, extra


def loss_and_grads(m, packed: bool):
    src, tgt, extra = batch(packed)
    m.zero_grad()
    out = m(src, tgt, labels=tgt, **extra)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


CASES = [(name, packed) for name in MODELS for packed in (False, True) if not (packed and "tglobal" in name)]


@pytest.mark.parametrize("name, packed", CASES, ids=[f"{n}-{'packed' if p else 'padded'}" for n, p in CASES])
def test_attention_by_chunks_equals_the_whole_scores_gradients_included(name, packed, monkeypatch):
    m = model(name)
    whole_logits, whole_grads = loss_and_grads(m, packed)
    m.encoder.long_scores = 0  # every layer by chunks, of 7 query rows (40 rows: the last chunk shorter)
    monkeypatch.setattr(chunked_attention, "CHUNK_SCORES", 7 * 2 * m.config.n_heads * 60)
    monkeypatch.setattr(blocked_band, "GROUP_SCORES", 1)  # a band by blocks, each block recomputed on its own
    chunked_logits, chunked_grads = loss_and_grads(m, packed)
    assert (chunked_logits - whole_logits).abs().max() < 1e-5
    assert chunked_grads.keys() == whole_grads.keys()
    gaps = {n: (chunked_grads[n] - g).abs().max().item() for n, g in whole_grads.items()}
    assert max(gaps.values()) < 1e-5, max(gaps.items(), key=lambda item: item[1])


def saved_bytes(m, length: int) -> int:
    """Bytes autograd keeps for the backward pass of one step on one source of `length` tokens (unique
    storages, parameters left out)."""
    storages = {}

    def pack(tensor):
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    src = torch.randint(3, V - 1, (1, length), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(src, src[:, :4], labels=src[:, :4]).loss.backward()
    params = {p.untyped_storage().data_ptr() for p in m.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params)


def test_what_training_keeps_grows_linearly_by_chunks_and_with_the_square_whole():
    m = model("t5")
    short, long = saved_bytes(m, 512), saved_bytes(m, 1024)
    assert long / short > 3  # the whole scores (and T5's bias) of every layer: four times the numbers
    m.encoder.long_scores = 0
    short, long = saved_bytes(m, 512), saved_bytes(m, 1024)
    assert long / short < 2.2  # by chunks: what a token keeps, twice the tokens


def test_what_training_keeps_by_blocks_grows_linearly(monkeypatch):
    """LongT5's local band by blocks keeps its blocks' scores (no group recomputed at these lengths) or, past
    GROUP_SCORES, its groups' inputs alone: either way what a token keeps, twice the tokens."""
    m = model("longt5-local")
    short, long = saved_bytes(m, 512), saved_bytes(m, 1024)
    assert long / short < 2.2
    monkeypatch.setattr(blocked_band, "GROUP_SCORES", 1 << 12)
    grouped_short, grouped_long = saved_bytes(m, 512), saved_bytes(m, 1024)
    assert grouped_long / grouped_short < 2.2 and grouped_long < long


STEP_16K = """
import os, resource, threading, time, torch, encdec

def watch():  # a whole-score path (4 GiB a score tensor) ends here instead of filling the machine
    while int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") < 3 * 2**30:
        time.sleep(0.02)
    os._exit(3)

threading.Thread(target=watch, daemon=True).start()
torch.set_num_threads(1)
torch.manual_seed(0)
model = encdec.build_model(encdec.preset("t5-tiny", vocab_size=1000, **OVERRIDES)).train()
src = torch.randint(3, 1000, (1, 16384))
tgt = torch.randint(3, 1000, (1, 16))
model(src, tgt, labels=tgt).loss.backward()
assert all(p.grad is not None for p in model.encoder.parameters())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
"""


LONG_KINDS = {
    "t5": {},
    "longt5-local": dict(encoder_attention="local", local_radius=127),
    "longt5-tglobal": dict(encoder_attention="transient_global", local_radius=127),
}


@pytest.mark.parametrize("kind", LONG_KINDS)
def test_a_16k_token_source_trains_by_chunks_without_asking_within_2_gib(kind):
    """The encoder picks chunks (LongT5's band: blocks) by itself at this length: a step of t5-tiny on 16,384
    source tokens peaks under 2 GiB resident (Python and torch included, 1.0-1.2 GiB measured), where one layer's
    whole scores would be 4 GiB. The child's memory is watched (it ends at 3 GiB) and its processor time bounded
    (T5's chunks: 175 s of one core measured, 900 allowed; LongT5's blocks: a few seconds), not its wall-clock
    time: beside other jobs a 600 s wall-clock limit failed."""
    script = STEP_16K.replace("**OVERRIDES", ", ".join(f"{k}={v!r}" for k, v in LONG_KINDS[kind].items()))
    done = run_bounded([sys.executable, "-c", script], cpu_seconds=900)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert float(done.stdout.strip().splitlines()[-1]) < 2.0


@pytest.mark.parametrize("name, path", [("t5", chunked_attention), ("longt5-tglobal", blocked_band)])
def test_dropout_by_chunks_is_recomputed_as_it_was_drawn(name, path, monkeypatch):
    """In training each chunk's (or group of blocks') scores are recomputed in the backward pass: with attention
    dropout, the mask drawn again must be the one the forward pass used, so the gradients equal those of chunks
    kept whole."""
    preset_name, overrides = MODELS[name]

    def run():
        torch.manual_seed(0)
        m = build_model(preset(preset_name, vocab_size=V, dropout=0.3, **overrides)).train()
        m.encoder.long_scores = 0
        torch.manual_seed(5)
        return loss_and_grads(m, packed=False)

    monkeypatch.setattr(chunked_attention, "CHUNK_SCORES", 10 * 2 * 4 * 40)
    monkeypatch.setattr(blocked_band, "GROUP_SCORES", 1)
    recomputed_logits, recomputed = run()
    monkeypatch.setattr(path, "checkpoint", lambda fn, *args, **kwargs: fn(*args))  # kept whole
    kept_logits, kept = run()
    assert torch.equal(recomputed_logits, kept_logits)
    assert all(torch.allclose(recomputed[n], kept[n], atol=1e-6) for n in kept)


def test_a_banded_layer_reads_only_the_keys_within_its_band(monkeypatch):
    """LongT5's local attention sees keys at most local_radius away: by chunks (a band whose kinds cannot be
    attended by blocks), each chunk of query rows reads only the keys within the band of its rows, so the scores
    computed grow linearly with the input (here, a 2,048-token source: under 5% of the whole scores), and the
    logits are the whole path's."""
    from encdec.models import encoder
    from encdec.modules import attention

    monkeypatch.setattr(encoder.SelfMasks, "blocks", lambda *args: None)
    torch.manual_seed(0)
    cfg = preset("t5-tiny", vocab_size=V, dropout=0.0, encoder_attention="local", local_radius=8)
    m = build_model(cfg).eval()
    src = torch.randint(3, V - 1, (1, 2048), generator=torch.Generator().manual_seed(0))
    tgt = src[:, :5]
    widths = []
    real_attend = attention.attend

    def counted(q, k, *args, **kwargs):
        if q.shape[2] != tgt.shape[1]:  # the encoder's (the decoder's queries are the target's 5)
            widths.append((q.shape[2], k.shape[2]))
        return real_attend(q, k, *args, **kwargs)

    monkeypatch.setattr(attention, "attend", counted)
    with torch.no_grad():
        banded = m(src, tgt).logits
    assert len(widths) == 2 * len(range(0, 2048, widths[0][0]))  # both layers, by chunks
    assert all(keys <= rows + 2 * 8 for rows, keys in widths)
    assert sum(rows * keys for rows, keys in widths) < 0.05 * 2 * 2048 * 2048
    monkeypatch.setattr(encoder, "BAND_SHARE", 10**9)  # the whole scores (below LONG_SCORES at 2,048)
    widths.clear()
    with torch.no_grad():
        whole = m(src, tgt).logits
    assert widths == [(2048, 2048)] * 2
    assert (banded - whole).abs().max() < 1e-5


def test_a_band_by_blocks_reads_three_blocks_of_keys_per_block_and_its_bias_once(monkeypatch):
    """By blocks of local_radius + 1, each block of queries reads its own block of keys and the two beside it,
    every layer's scores in one product (no group at this size), so the scores computed grow linearly with the
    input (a 2,048-token source: under 3% of the whole scores); T5's bias table is read once a forward (the two
    layers share it), not per chunk; and the logits are the whole path's."""
    from encdec.models import encoder
    from encdec.modules import positions

    torch.manual_seed(0)
    cfg = preset("t5-tiny", vocab_size=V, dropout=0.0, encoder_attention="local", local_radius=8)
    m = build_model(cfg).eval()
    src = torch.randint(3, V - 1, (1, 2048), generator=torch.Generator().manual_seed(0))
    tgt = src[:, :5]
    groups, buckets = [], []
    real_group, real_bias = blocked_band._group, positions.RelativePositionBias.forward

    def counted(q_rows, n0, n1, **kwargs):
        groups.append((q_rows.shape[2], n1 - n0, kwargs["blocks"].size))
        return real_group(q_rows, n0, n1, **kwargs)

    def looked_up(table, q_pos, k_pos):  # the pairs whose bias a lookup reads
        buckets.append(q_pos.shape[-1] * k_pos.shape[-1])
        return real_bias(table, q_pos, k_pos)

    monkeypatch.setattr(blocked_band, "_group", counted)
    monkeypatch.setattr(positions.RelativePositionBias, "forward", looked_up)
    with torch.no_grad():
        banded = m(src, tgt).logits
    assert groups == [(2048, 228, 9)] * 2  # 2,048 rows in 228 blocks of 9, each layer in one group
    scores = sum(blocks * size * 3 * size for _, blocks, size in groups)
    assert scores < 0.03 * 2 * 2048 * 2048
    assert buckets[0] == 9 * 27  # the encoder's one lookup: a block's queries over its three blocks of keys
    monkeypatch.setattr(encoder, "BAND_SHARE", 10**9)  # the whole scores (below LONG_SCORES at 2,048)
    with torch.no_grad():
        whole = m(src, tgt).logits
    assert (banded - whole).abs().max() < 1e-5


@pytest.mark.parametrize("name", ["transformer", "learned", "rot5", "t5", "longt5-tglobal", "gemma"])
def test_without_gradients_a_layer_of_padding_alone_is_attended_whole_by_sdpa_as_by_chunks(name, monkeypatch):
    """Inference over a long input: a layer whose kinds change no score (sinusoidal, learned, RoPE) runs whole in
    SDPA's fused kernel, which holds no scores, computing what its chunks compute; a bias (T5's), global keys or
    a cap on the scores keeps the chunks, and so does training (gradients)."""
    from encdec.modules.chunked_attention import LazyMask

    m = model(name).eval()
    m.encoder.long_scores = 0  # every layer past the threshold of chunks
    monkeypatch.setattr(chunked_attention, "CHUNK_SCORES", 7 * 2 * m.config.n_heads * 60)
    src, tgt, extra = batch(False)
    seen = []
    attention_inputs = m.encoder.attention_inputs
    monkeypatch.setattr(m.encoder, "attention_inputs", lambda masks: seen.append(attention_inputs(masks)) or seen[-1])
    with torch.no_grad():
        whole = m(src, tgt, **extra).logits
        monkeypatch.setattr(type(m.encoder), "fused", lambda self, layer, packed: False)
        chunked = m(src, tgt, **extra).logits
    lazy = [isinstance(inputs.mask, LazyMask) for inputs in seen[0]]
    assert lazy == [name in ("t5", "longt5-tglobal", "gemma")] * len(lazy)
    assert all(isinstance(inputs.mask, LazyMask) for inputs in seen[1])
    assert (whole - chunked).abs().max() < 1e-5
    monkeypatch.undo()
    m.encoder.long_scores = 0
    seen.clear()
    monkeypatch.setattr(m.encoder, "attention_inputs", lambda masks: seen.append(attention_inputs(masks)) or seen[-1])
    m(src, tgt, **extra)  # gradients recorded: chunks, recomputed in the backward pass
    assert all(isinstance(inputs.mask, LazyMask) for inputs in seen[0])
