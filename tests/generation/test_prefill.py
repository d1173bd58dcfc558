"""A causal family's prefill: the prompt but its last token runs once per example, with no vocabulary
product; the beams then copy the example's caches, and the first step decodes the prompt's last token
(generate's placeholder's place), the vocabulary product on that position only. Nothing a search sees
changes."""

import dataclasses

import pytest
import torch

from encdec.generation.interface import capabilities_of

from .test_left_padding import FAMILIES, left_padded, prompts_of, tiny


@pytest.mark.parametrize("name", FAMILIES)
def test_the_head_runs_on_the_first_step_alone_on_one_position_a_row(monkeypatch, name):
    model = tiny(name)
    ids, mask = left_padded(prompts_of([6, 4]))
    shapes = []
    head = model.logits
    monkeypatch.setattr(model, "logits", lambda hidden: shapes.append(tuple(hidden.shape[:2])) or head(hidden))
    with torch.inference_mode():
        state = model.start(ids, mask, 5, beams=3)
        assert shapes == []
        model.step(torch.zeros(6, 1, dtype=torch.long), state)
    assert shapes == [(6, 1)]


@pytest.mark.parametrize("name", FAMILIES)
def test_beams_after_a_shared_prefill_step_as_rows_prefilled_each(name):
    """start(beams=3) gives each beam its example's last prompt logits and caches: steps after it
    equal those of the prompt repeated three times and prefilled row by row."""
    model = tiny(name)
    ids, mask = left_padded(prompts_of([6, 4]))
    with torch.inference_mode():
        shared = model.start(ids, mask, 5, beams=3)
        each = model.start(ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0), 5, beams=1)
        full = model(ids[:1], ids[:1])  # an uncached forward of the unpadded prompt: its last logits
        tokens = torch.zeros(6, 1, dtype=torch.long)
        first_shared, first_each = model.step(tokens, shared), model.step(tokens, each)
        assert first_shared.shape == (6, 1, full.logits.shape[-1])
        torch.testing.assert_close(first_shared, first_each, rtol=1e-5, atol=1e-5)
        if name == "decoder_only":
            torch.testing.assert_close(first_shared[:3, 0], full.logits[:, -1].expand(3, -1), rtol=1e-4, atol=1e-4)
        next_tokens = torch.arange(6)[:, None] % 5 + 1
        after_shared, after_each = model.step(next_tokens, shared), model.step(next_tokens, each)
        torch.testing.assert_close(after_shared, after_each, rtol=1e-5, atol=1e-5)


PREFIX_OPTIONS = {
    "greedy": dict(max_new_tokens=6),
    "beam": dict(max_new_tokens=6, num_beams=3),
    "groups": dict(max_new_tokens=6, num_beams=4, num_beam_groups=2, diversity_penalty=0.5),
    "sampling": dict(max_new_tokens=6, do_sample=True, seed=2),
}


@pytest.mark.parametrize("options", PREFIX_OPTIONS.values(), ids=PREFIX_OPTIONS)
@pytest.mark.parametrize("name", ["t5", "decoder_only", "ar_encdec"])
def test_a_decoder_prefix_is_multiplied_by_the_vocabulary_on_its_last_position_only(monkeypatch, name, options):
    """The first step of a search over a decoder prefix of four positions computes logits for one of them,
    and the tokens equal those of a step that computes all four."""
    import encdec

    from . import helpers

    if name == "t5":
        model, V = helpers.tiny("t5"), helpers.V
        head_name, src = "head", torch.randint(3, V, (2, 9))
        mask = None
    else:
        model = tiny(name)
        head_name = "logits"
        src, mask = left_padded(prompts_of([6, 4]))
    prefix = torch.tensor([[0, 5, 7, 9]] * 2)
    shapes = []
    head = getattr(model, head_name)
    monkeypatch.setattr(model, head_name, lambda hidden: shapes.append(hidden.shape[1]) or head(hidden))
    with torch.inference_mode():
        got = encdec.generate(model, src, mask, decoder_input_ids=prefix, **options)
        assert max(shapes) == 1
        without_last_only = dataclasses.replace(capabilities_of(model), steps_last_only=False)
        monkeypatch.setattr(type(model), "capabilities", without_last_only)
        shapes.clear()
        want = encdec.generate(model, src, mask, decoder_input_ids=prefix, **options)
    assert max(shapes) == 4  # a causal LM's start token is decoded as the prompt's last: four positions too
    assert torch.equal(got, want)
