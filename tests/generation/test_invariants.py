"""Invariants of generation that hold for every family, whatever the weights, on the device under test.

Inputs are made on the host, as a tokenizer makes them; generate() moves them. Where
results may differ by a kernel's summation order (CUDA), `exact` is False and token
checks allow one near tie, float checks a looser tolerance.
"""

import pytest
import torch

import encdec

from .helpers import FAMILIES, Uncached, V, assert_tokens_match, padded_batch, tiny

BEAM = dict(num_beams=3, length_penalty=0.7, no_repeat_ngram_size=3, max_new_tokens=10)
GREEDY_AND_BEAM = pytest.mark.parametrize("options", [dict(max_new_tokens=10), BEAM], ids=["greedy", "beam"])


def strip(row: torch.Tensor, eos: int, pad: int = 0) -> list[int]:
    """A row up to its first EOS, without padding (beam search pads with EOS when pad is 0, as HF does)."""
    tokens = row.tolist()
    if eos in tokens[1:]:
        return tokens[: tokens.index(eos, 1) + 1]
    while tokens and tokens[-1] == pad:
        tokens.pop()
    return tokens


def frequent_token(model, src, mask) -> int:
    """A token greedy decoding emits early, used as EOS so that rows finish at different steps."""
    out = encdec.generate(model, src, mask, max_new_tokens=6, eos_token_id=[])
    return int(out[0, 3])


def model_batch_and_eos(name: str, device):
    """A tiny model of family `name` on `device`, a padded batch for it, and a token it emits early as its EOS."""
    model = tiny(name).to(device)
    src, mask = padded_batch()
    return model, src, mask, frequent_token(model, src, mask)


@pytest.mark.parametrize("name", FAMILIES)
@GREEDY_AND_BEAM
def test_cached_generation_equals_uncached_recomputation(name, options, device, exact):
    model, src, mask, eos = model_batch_and_eos(name, device)
    cached = encdec.generate(model, src, mask, eos_token_id=eos, **options)
    uncached = encdec.generate(Uncached(model), src, mask, eos_token_id=eos, **options)
    assert cached.device == uncached.device == next(model.parameters()).device
    assert_tokens_match(cached, uncached, exact)


@pytest.mark.parametrize("name", ["t5", "rot5", "transformer-pre"])
def test_beam_search_of_width_one_equals_greedy(name, device):
    model = tiny(name).to(device)
    src, mask = padded_batch()
    greedy = encdec.generate(model, src, mask, max_new_tokens=12)
    beam = encdec.generate(model, src, mask, max_new_tokens=12, num_beams=1, length_penalty=2.0)
    assert torch.equal(beam, greedy)  # the same computation on any device


@pytest.mark.parametrize("name", ["t5", "rot5-prepended", "transformer-post"])
@GREEDY_AND_BEAM
def test_a_batch_equals_its_examples_decoded_one_by_one(name, options, device, exact):
    model, src, mask, eos = model_batch_and_eos(name, device)
    together = encdec.generate(model, src, mask, eos_token_id=eos, **options)
    differing = 0
    for b in range(src.shape[0]):
        length = int(mask[b].sum())
        alone = encdec.generate(model, src[b : b + 1, :length], eos_token_id=eos, **options)
        differing += strip(together[b], eos) != strip(alone[0], eos)
    assert differing <= (0 if exact else 1)  # off the CPU, a batch's kernels may flip one near tie


def test_rot5_gqa_with_rope_stays_equal_to_the_full_forward_over_120_cached_steps(device):
    model = tiny("rot5", n_heads=4, n_kv_heads=2).to(device)
    assert model.config.positions.kind == "rope" and model.config.n_kv_heads < model.config.n_heads
    src, mask = (t.to(device) for t in padded_batch(S=9))
    tgt = torch.randint(3, V, (3, 120), device=device)
    full = model(src, tgt, src_mask=mask).logits
    state = model.start(src, mask, max_new_tokens=16)  # outgrown on purpose: the buffers grow
    stepped = torch.cat([model.step(tgt[:, t : t + 1], state) for t in range(120)], dim=1)
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["t5", "rot5-prepended"])
def test_beams_sharing_one_cross_attention_cache_equal_expanded_rows(name, device, exact):
    model = tiny(name).to(device)
    src, mask = (t.to(device) for t in padded_batch())
    tgt = torch.randint(3, V, (9, 4), device=device)
    shared = model.start(src, mask, max_new_tokens=8, beams=3)
    expanded = model.start(src.repeat_interleave(3, 0), mask.repeat_interleave(3, 0), max_new_tokens=8)
    a = torch.cat([model.step(tgt[:, t : t + 1], shared) for t in range(4)], dim=1)
    b = torch.cat([model.step(tgt[:, t : t + 1], expanded) for t in range(4)], dim=1)
    tolerance = 1e-5 if exact else 1e-4
    torch.testing.assert_close(a, b, atol=tolerance, rtol=tolerance)
    assert shared.memory[0].keys.shape[0] == 3  # one row per example, not per beam


def test_seeded_sampling_is_reproducible_and_seeds_differ(device):
    model = tiny("rot5").to(device)
    src, mask = padded_batch()
    options = dict(do_sample=True, top_k=20, top_p=0.9, temperature=1.3, max_new_tokens=12, eos_token_id=[])
    first = encdec.generate(model, src, mask, seed=7, **options)
    again = encdec.generate(model, src, mask, seed=7, **options)
    other = encdec.generate(model, src, mask, seed=8, **options)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    generator = torch.Generator(device=device).manual_seed(7)
    assert torch.equal(encdec.generate(model, src, mask, generator=generator, **options), first)


def test_sampling_several_sequences_per_example_lays_them_out_example_major(device):
    model = tiny("t5").to(device)
    src, mask = padded_batch()
    out = encdec.generate(model, src, mask, do_sample=True, num_return_sequences=4, seed=0, max_new_tokens=5)
    assert out.shape[0] == 12
    assert (out[:, 0] == model.config.decoder_start_id).all()


def test_generation_leaves_a_training_model_in_training_mode(device):
    model = tiny("t5").to(device).train()
    src, mask = padded_batch()
    encdec.generate(model, src, mask, max_new_tokens=3)
    assert model.training


@pytest.mark.parametrize("name", FAMILIES)
def test_a_model_made_under_inference_mode_generates_the_same(name, device):
    """Weights created inside torch.inference_mode are inference tensors, without the version counter the
    CPU kernels' cached weight copies check; generation with them equals generation with ordinary ones."""
    model = tiny(name).to(device)
    with torch.inference_mode():
        frozen = tiny(name).to(device)
        frozen.load_state_dict(model.state_dict())
        assert next(frozen.parameters()).is_inference()
    src, mask = padded_batch()
    for options in (dict(max_new_tokens=6), dict(num_beams=3, max_new_tokens=6)):
        want = encdec.generate(model, src, mask, **options)
        with torch.inference_mode():
            got = encdec.generate(frozen, src, mask, **options)
        assert torch.equal(got, want)
