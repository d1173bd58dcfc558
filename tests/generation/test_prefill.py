"""A causal family's prefill: the prompt runs once per example and the vocabulary product covers its
last position only; the beams then copy the example's caches. Nothing a search sees changes."""

import pytest
import torch

from .test_left_padding import FAMILIES, left_padded, prompts_of, tiny


@pytest.mark.parametrize("name", FAMILIES)
def test_prefill_runs_the_head_on_one_position_once_per_example(monkeypatch, name):
    model = tiny(name)
    ids, mask = left_padded(prompts_of([6, 4]))
    shapes = []
    head = model.logits
    monkeypatch.setattr(model, "logits", lambda hidden: shapes.append(tuple(hidden.shape[:2])) or head(hidden))
    with torch.inference_mode():
        model.start(ids, mask, 5, beams=3)
    assert shapes == [(2, 1)]


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
