"""The stop test of greedy decoding, sampling and beam search may wait for the host only every few steps (on an
accelerator it does): the output is cut where every row was first done, so it equals a per-step test's."""

import importlib

import pytest
import torch

import encdec
import encdec.generation.search as search

from .helpers import padded_batch, tiny

beam_search = importlib.import_module("encdec.generation.beam_search")  # the package exports the function


def ending_tokens(model, src, mask, **options) -> list[int]:
    """EOS ids that end every row by its fourth token, at different steps: each row's fourth token."""
    out = encdec.generate(model, src, mask, eos_token_id=[], **{**options, "max_new_tokens": 4})
    return sorted(set(out[:, 4].tolist()))


def per_step_and_delayed(monkeypatch, module, name: str, every: int, eos_options: dict, options: dict):
    """generate's output with the stop test at every step, then with `module`'s sync interval set to `every`
    (checked to be asked for once), on a tiny `name` model whose rows end at different steps."""
    model = tiny(name)
    src, mask = padded_batch()
    eos = ending_tokens(model, src, mask, **eos_options)
    per_step = encdec.generate(model, src, mask, eos_token_id=eos, **options)
    syncs = []
    monkeypatch.setattr(module, "sync_interval", lambda device, cfg: syncs.append(every) or every)
    delayed = encdec.generate(model, src, mask, eos_token_id=eos, **options)
    assert syncs == [every]
    return per_step, delayed


OPTIONS = {
    "greedy": dict(max_new_tokens=12),
    "sampling": dict(max_new_tokens=12, do_sample=True, top_k=20, seed=3),
    "two samples": dict(max_new_tokens=12, do_sample=True, num_return_sequences=2, seed=5),
}


@pytest.mark.parametrize("name", ["t5", "rot5", "transformer-pre"])
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS)
@pytest.mark.parametrize("every", [2, 3, 50])
def test_syncing_every_few_steps_gives_the_per_step_output(monkeypatch, name, options, every):
    # rows finish at different steps, all before the maximum
    per_step, delayed = per_step_and_delayed(monkeypatch, search, name, every, options, options)
    assert torch.equal(delayed, per_step)
    assert per_step.shape[1] <= 5  # cut before the maximum


def test_steps_the_host_does_not_check_are_computed_and_dropped(monkeypatch):
    """With a check every 50 steps, decoding runs to the maximal length yet returns the early-stopped rows."""
    model = tiny("t5")
    src, mask = padded_batch()
    eos = ending_tokens(model, src, mask)
    per_step = encdec.generate(model, src, mask, eos_token_id=eos, max_new_tokens=12)
    calls = []
    step = model.step
    monkeypatch.setattr(model, "step", lambda ids, state: calls.append(1) or step(ids, state))
    monkeypatch.setattr(search, "sync_interval", lambda device, cfg: 50)
    delayed = encdec.generate(model, src, mask, eos_token_id=eos, max_new_tokens=12)
    assert torch.equal(delayed, per_step) and per_step.shape[1] <= 5
    assert len(calls) == 12  # every step up to the maximum: the host looked only at the end


def test_a_cpu_and_a_streamer_check_every_step():
    cfg = encdec.generation.GenerationConfig.from_options(None, max_new_tokens=4)
    assert search.sync_interval(torch.device("cpu"), cfg) == 1
    assert search.sync_interval(torch.device("meta"), cfg) == search.SYNC_EVERY
    cfg.output_scores = True
    assert search.sync_interval(torch.device("meta"), cfg) == 1


BEAMS = {
    "beam 4": dict(max_new_tokens=12, num_beams=4),
    "early stopping": dict(max_new_tokens=12, num_beams=3, early_stopping=True, num_return_sequences=2),
    "never, length penalty": dict(max_new_tokens=12, num_beams=3, early_stopping="never", length_penalty=1.5),
    "beam sampling": dict(max_new_tokens=12, num_beams=2, do_sample=True, seed=7),
}


@pytest.mark.parametrize("name", ["t5", "rot5"])
@pytest.mark.parametrize("options", BEAMS.values(), ids=BEAMS)
@pytest.mark.parametrize("every", [2, 3, 50])
def test_beam_search_syncing_every_few_steps_gives_the_per_step_output(monkeypatch, name, options, every):
    per_step, delayed = per_step_and_delayed(monkeypatch, beam_search, name, every, {}, options)  # beams end apart
    assert torch.equal(delayed, per_step)


def test_beam_search_steps_the_host_does_not_check_are_computed_and_dropped(monkeypatch):
    """With a check every 50 steps, beam search runs to the maximal length yet returns what stopped early."""
    model = tiny("t5")
    src, mask = padded_batch()
    options = dict(max_new_tokens=12, num_beams=3, early_stopping=True)
    first = encdec.generate(model, src, mask, eos_token_id=[], max_new_tokens=3, num_beams=3, num_return_sequences=3)
    eos = sorted(set(first[:, 1:].flatten().tolist()))  # every beam can end within three tokens
    calls = []
    step = model.step
    monkeypatch.setattr(model, "step", lambda ids, state: calls.append(1) or step(ids, state))
    per_step = encdec.generate(model, src, mask, eos_token_id=eos, **options)
    per_step_calls, calls[:] = len(calls), []
    monkeypatch.setattr(beam_search, "sync_interval", lambda device, cfg: 50)
    delayed = encdec.generate(model, src, mask, eos_token_id=eos, **options)
    assert torch.equal(delayed, per_step) and per_step.shape[1] < 13  # stopped before the maximum
    assert per_step_calls < len(calls) == 12  # every step up to the maximum ran: the host looked only at the end
