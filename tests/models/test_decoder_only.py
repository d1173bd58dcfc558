"""The nanoGPT-style decoder-only baseline (SEEDS.md section 5)."""

import math

import pytest
import torch
from lm_checks import V, assert_lm_cached_equals_full, assert_lm_generate_is_greedy_over_full_forward, tiny

from encdec.errors import ConfigError, DataError
from encdec.modules import AttentionInputs, RunningBatch


def test_forward_is_gpt_with_a_tied_head_and_no_biases():
    model = tiny("decoder_only-tiny")
    assert all(not name.endswith("bias") for name, _ in model.named_parameters())
    ids = torch.randint(0, V, (2, 6))
    with torch.no_grad():
        x = model.embed(ids) + model.positions.weight[:6]
        for block in model.blocks:
            h = block.self_attn_norm(x)
            x = x + block.self_attn(h, None, AttentionInputs(is_causal=True))
            x = x + block.ffn.wo(torch.nn.functional.gelu(block.ffn.wi(block.ffn_norm(x))))
        expected = model.final_norm(x) @ model.embed.weight.T
        torch.testing.assert_close(model(None, ids).logits, expected)


def test_loss_is_cross_entropy_and_src_ids_are_ignored():
    model = tiny("decoder_only-tiny")
    ids, labels = torch.randint(0, V, (2, 6)), torch.randint(0, V, (2, 6))
    out = model(torch.randint(0, V, (2, 3)), ids, labels=labels)
    expected = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), labels.flatten())
    torch.testing.assert_close(out.loss, expected)
    assert torch.equal(out.loss, out.ce_loss)


def test_dropout_is_active_in_training_only():
    model = tiny("decoder_only-tiny", dropout=0.2)
    ids = torch.randint(0, V, (2, 6))
    with torch.no_grad():
        model.train()
        a, b = model(None, ids).logits, model(None, ids).logits
        model.eval()
        c, d = model(None, ids).logits, model(None, ids).logits
    assert not torch.allclose(a, b)
    assert torch.equal(c, d)


def test_init_scales_residual_projections():
    model = tiny("decoder_only-tiny", d_model=128, d_ff=512, n_encoder_layers=8)
    assert model.blocks[3].ffn.wo.weight.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.1)
    assert model.blocks[3].ffn.wi.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_context_overflow_and_right_padded_prompts_are_refused_in_one_sentence():
    model = tiny("decoder_only-tiny")
    with pytest.raises(ConfigError, match="context is 128"):
        model.start(torch.zeros(1, 100, dtype=torch.long), None, 40)
    with pytest.raises(DataError, match="padded on the left"):
        model.start(torch.zeros(2, 4, dtype=torch.long), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]).bool(), 4)


def test_without_a_prompt_every_stepped_token_is_real():
    model = tiny("decoder_only-tiny")
    ids = torch.randint(0, V, (2, 7))
    state = model.start(None, None, 8)
    got = torch.cat([model.step(ids[:, :3], state), model.step(ids[:, 3:], state)], dim=1)
    torch.testing.assert_close(got, model(None, ids).logits, atol=1e-5, rtol=1e-5)


def test_cached_decoding_equals_the_full_forward(device):
    assert_lm_cached_equals_full(tiny("decoder_only-tiny").to(device))


def test_generate_greedy_equals_argmax_over_the_full_forward(device):
    assert_lm_generate_is_greedy_over_full_forward(tiny("decoder_only-tiny").to(device))


# Gemma 3's layout in small: a window of 3 in every layer but each second, the sliding layers' RoPE of their own base
# beside the global layers' scaled one, Gemma's norms and caps
GEMMA = dict(
    position="rope",
    norm="gemma_rmsnorm",
    post_norms=True,
    activation="gated_gelu",
    scale_embeddings=True,
    qk_norm=True,
    sliding_window=3,
    rope_local_theta=100.0,
    rope_scale=2.0,
    attention_softcap=5.0,
    logit_softcap=3.0,
)


def test_a_sliding_window_decodes_with_caches_as_the_full_forward():
    """Prompt and steps outgrow the window: the cache keeps every key and masks those it has left behind."""
    assert_lm_cached_equals_full(tiny("decoder_only-tiny", **GEMMA))


def test_a_sliding_window_generates_the_argmax_of_the_full_forward():
    assert_lm_generate_is_greedy_over_full_forward(tiny("decoder_only-tiny", **GEMMA), prompt_len=5, new=8)


def test_a_sliding_window_decodes_rows_at_columns_of_their_own_as_the_full_forward():
    """A server's batch: two prompts of 5 and 2 tokens join one state, each row masking by its own column."""
    model = tiny("decoder_only-tiny", **GEMMA)
    ids = torch.randint(0, V - 2, (2, 12), generator=torch.Generator().manual_seed(0))
    batch = RunningBatch("cpu", torch.float32)
    for row, prompt_len in enumerate((5, 2)):
        batch.join(model.start(ids[row : row + 1, :prompt_len], None, 12), [1])
    got = [model.step(torch.zeros(2, 1, dtype=torch.long), batch)]  # the placeholders: each prompt's last token
    for k in range(7):
        got.append(model.step(torch.stack((ids[0, 5 + k], ids[1, 2 + k]))[:, None], batch))
    full = model(None, ids).logits
    got = torch.cat(got, dim=1)
    torch.testing.assert_close(got[0], full[0, 4:12], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], full[1, 1:9], atol=1e-5, rtol=1e-5)


def test_a_sliding_window_reads_fewer_keys_than_the_whole_sequence():
    """The window is no setting in name only: a wider one changes the logits of a longer sequence."""
    ids = torch.randint(0, V - 2, (2, 10))
    with torch.no_grad():
        narrow = tiny("decoder_only-tiny", **GEMMA)(None, ids).logits
        wide = tiny("decoder_only-tiny", **GEMMA | {"sliding_window": 10})(None, ids).logits
    torch.testing.assert_close(narrow[:, :3], wide[:, :3])  # the first positions see the same keys
    assert not torch.allclose(narrow[:, 3:], wide[:, 3:])
