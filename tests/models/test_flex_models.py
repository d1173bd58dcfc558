"""A whole encoder-decoder through FlexAttention (model.attention.implementation: flex) equals the dense path: T5,
UMT5, LongT5's local and transient-global encoders, Longformer's global tokens, a Gemma window, T5Gemma 2's merged
attention; padded and packed batches. On the CPU its forward (eager, torch's unfused reference); on a GPU forward and
backward, and auto choosing it (the cuda-marked test)."""

import numpy as np
import pytest
import torch

from encdec.data.batch import IGNORE_INDEX, collate_encoder_decoder
from encdec.data.objectives.packing import collate_packed
from encdec.errors import ConfigError
from encdec.models import ModelConfig, build_model
from encdec.modules import flex_attention
from encdec.modules.flex_attention import FlexMask

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

V = 40
TINY = dict(vocab_size=V, d_model=16, d_ff=32, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_head=8, dropout=0.0)
MODELS = {
    "t5": {},
    "umt5": {"relative_bias_per_layer": True},
    "longt5-local": {"encoder_attention": "local", "local_radius": 3},
    "longt5-transient-global": {"encoder_attention": "transient_global", "local_radius": 3, "global_block_size": 4},
    "led-global-tokens": {"encoder_attention": "local_global", "local_radius": 3, "global_tokens": "first"},
    "gemma-window": {"position": "rope", "sliding_window": 3, "n_kv_heads": 1},
    "t5gemma2-merged": {"position": "rope", "rope_cross": "none", "merged_cross_attention": True, "sliding_window": 3},
    "alibi-dilated": {"attention.kinds": {"alibi": {}, "dilated_band": {"width": 2, "dilation": 2}}},
}


def config(name: str, implementation: str, **more) -> ModelConfig:
    options = dict(MODELS[name])
    kinds = options.pop("attention.kinds", {})
    attention = {"implementation": implementation, "kinds": kinds}
    return ModelConfig.from_dict(dict(family="encoder_decoder", **(TINY | options | more), attention=attention))


def twins(name: str, **more):
    """The model with the dense path and with FlexAttention, one set of weights (nonzero relative biases)."""
    torch.manual_seed(0)
    dense = build_model(config(name, "dense", **more)).eval()
    for param in dense.parameters():
        if param.dim() == 2 and param.shape[1] == TINY["n_heads"]:  # a bias table: buckets x heads, zero at first
            torch.nn.init.normal_(param)
    flex = build_model(config(name, "flex", **more)).eval()
    flex.load_state_dict(dense.state_dict())
    return dense, flex


def batch():
    rng = np.random.default_rng(0)
    lengths = [(21, 9), (13, 6), (5, 7)]
    data = [(rng.integers(3, V, s), np.append(rng.integers(3, V, t), 1)) for s, t in lengths]
    return data, collate_encoder_decoder(data, pad_id=0, decoder_start_id=0)


def real_logits(model, batch):
    with torch.no_grad():
        out = model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, **batch.packing)
    return out.logits[batch.labels != IGNORE_INDEX]


@pytest.mark.parametrize("name", list(MODELS))
def test_a_model_through_flex_attention_equals_the_dense_path(name, monkeypatch):
    dense, flex = twins(name)
    _, padded = batch()
    calls = []
    attend = FlexMask.attend
    monkeypatch.setattr(FlexMask, "attend", lambda self, *args: calls.append(self) or attend(self, *args))
    torch.testing.assert_close(real_logits(flex, padded), real_logits(dense, padded), atol=1e-5, rtol=1e-5)
    merged = name.endswith("merged")
    assert len(calls) == TINY["n_encoder_layers"] + TINY["n_decoder_layers"] * (1 if merged else 2)  # every one


def test_a_block_mask_is_made_once_a_batch_for_the_layers_of_one_rule(monkeypatch):
    """UMT5's layers each read a table of their own but one mask: one block mask for the encoder's, one for the
    decoder's self-attention, one for its cross-attention."""
    _, flex = twins("umt5")
    made = []
    create = flex_attention.create_block_mask
    monkeypatch.setattr(flex_attention, "create_block_mask", lambda *args, **kw: made.append(1) or create(*args, **kw))
    _, padded = batch()
    real_logits(flex, padded)
    assert len(made) == 3


@pytest.mark.parametrize("name", ["t5", "umt5", "longt5-local", "t5gemma2-merged"])
def test_a_packed_batch_through_flex_attention_equals_the_dense_path(name):
    dense, flex = twins(name)
    data, _ = batch()
    packed = collate_packed(data, pad_id=0, decoder_start_id=0, max_source_len=40, max_target_len=24)
    assert packed.src_segments.max() > 1
    torch.testing.assert_close(real_logits(flex, packed), real_logits(dense, packed), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "longt5-transient-global", "t5gemma2-merged"])
def test_a_model_through_flex_attention_compiles_whole(name):
    """torch.compile(fullgraph=True) takes the whole forward with its FlexMasks (block masks made inside, the
    extra keys' and the tables' mods) without a graph break (aot_eager: the graph, not inductor's CPU kernel;
    about 13 s each)."""
    dense, flex = twins(name)
    _, padded = batch()
    compiled = torch.compile(flex, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(real_logits(compiled, padded), real_logits(dense, padded), atol=1e-5, rtol=1e-5)


def test_the_setting_is_checked_and_flex_refuses_what_it_cannot_do():
    with pytest.raises(ConfigError, match="model.attention.implementation"):
        config("t5", "fast")
    torch.manual_seed(0)
    _, padded = batch()
    dropping = build_model(config("t5", "flex", dropout=0.1)).train()
    with pytest.raises(ConfigError, match="cannot drop attention probabilities"):
        dropping(padded.src_ids, padded.tgt_ids, src_mask=padded.src_mask)
    training = build_model(config("t5", "flex")).train()
    with pytest.raises(ConfigError, match="no backward on cpu"):
        training(padded.src_ids, padded.tgt_ids, src_mask=padded.src_mask)


def test_auto_keeps_the_dense_path_on_the_cpu(monkeypatch):
    """auto on the CPU never makes a FlexMask (FlexAttention is CUDA's fast path)."""
    auto_model = build_model(config("t5", "auto")).eval()
    calls = []
    monkeypatch.setattr(FlexMask, "attend", lambda *args: calls.append(args))
    _, padded = batch()
    real_logits(auto_model, padded)
    assert not calls


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["t5", "umt5", "longt5-transient-global", "t5gemma2-merged"])
def test_on_a_gpu_flex_attention_s_forward_and_backward_equal_the_dense_path_and_auto_takes_it(name, monkeypatch):
    dense, flex = twins(name)
    auto = build_model(config(name, "auto")).eval()
    auto.load_state_dict(dense.state_dict())
    _, padded = batch()
    results = []
    for model in (dense, flex, auto):
        model.cuda().train()  # dropout 0: training mode for the gradients alone
        model.zero_grad()
        src, tgt, mask = (t.cuda() for t in (padded.src_ids, padded.tgt_ids, padded.src_mask))
        out = model(src, tgt, src_mask=mask)
        labels = padded.labels.cuda()
        loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out.logits[labels != IGNORE_INDEX].detach(), grads))
    for logits, grads in results[1:]:
        torch.testing.assert_close(logits, results[0][0], atol=1e-4, rtol=1e-4)
        assert grads.keys() == results[0][1].keys()
        for key in grads:
            torch.testing.assert_close(grads[key], results[0][1][key], atol=1e-4, rtol=1e-4)
    calls = []
    attend = FlexMask.attend
    monkeypatch.setattr(FlexMask, "attend", lambda self, *args: calls.append(self) or attend(self, *args))
    auto(src, tgt, src_mask=mask)
    assert calls  # auto took FlexAttention on CUDA
