"""Fixed-shape decoding steps (a static-mode DecodeState) and generate(compile=True) (encdec.generation.compiled).

The fixed step must give the eager step's logits (up to the order of sums) at every position, after beam
reorders too; generate(compile=True) must give generate()'s tokens for greedy, beam and seeded sampling,
compiled, captured (CUDA) or fallen back to eager (logged once).
"""

import logging

import pytest
import torch

from encdec.generation import compiled, generate
from encdec.generation.compiled import EagerRunner, FixedShapeStepper, FixedState, FixedStep, bucket
from encdec.modules import DecodeState
from tests.generation.helpers import padded_batch, tiny

MODES = {
    "greedy": {},
    "beam 4": dict(num_beams=4),
    "sampling": dict(do_sample=True, seed=3, top_k=0),
    "group beam": dict(num_beams=4, num_beam_groups=2, diversity_penalty=0.5),
}


def eager_fixed_state(model, src, mask, max_new_tokens: int, beams: int) -> FixedState:
    """The fixed-shape state of a batch, its step run eagerly (no compile)."""
    state = model.start(src, mask, max_new_tokens, beams)
    step = FixedStep(model, DecodeState.fixed(state, bucket(max_new_tokens + 1), bucket(state.memory_width)))
    step.state.load(state)
    step.runner = EagerRunner(step)
    return FixedState(step)


@pytest.mark.parametrize(
    "family",
    [
        "t5",
        "t5-v1.1",
        "umt5",
        "rot5",
        "rot5-prepended",
        "rot5-moe",
        "gemma",
        "gemma2",
        "transformer-post",
        "transformer-pre",
    ],
)
def test_fixed_step_equals_eager_step(family):
    torch.manual_seed(0)
    model = tiny(family)
    src, mask = padded_batch(3, 11)
    beams, rows = 2, 6
    stepper = FixedShapeStepper(model)
    with torch.inference_mode():
        eager = model.start(src, mask, 10, beams)
        fixed = eager_fixed_state(model, src, mask, 10, beams)
        tokens = torch.zeros(rows, 1, dtype=torch.long)
        for position in range(9):
            expected = model.step(tokens, eager)[:, -1]
            got = stepper.step(tokens, fixed)[:, -1]
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
            index = torch.tensor([1, 0, 2, 2, 5, 4]) if position % 2 else torch.tensor([0, 0, 3, 2, 4, 4])
            eager.reorder(index)
            fixed.reorder(index)
            tokens = expected.argmax(-1, keepdim=True)[index]


def refuse_compile(monkeypatch):
    """Make torch.compile raise, and forget the warnings already logged."""

    def fail(*args, **kwargs):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(compiled.torch, "compile", fail)
    monkeypatch.setattr(compiled, "_warned", set())


@pytest.mark.parametrize("family", ["t5", "rot5", "transformer-pre"])
@pytest.mark.parametrize("mode", list(MODES))
def test_fallback_logs_once_and_keeps_tokens(family, mode, monkeypatch, caplog):
    refuse_compile(monkeypatch)
    torch.manual_seed(0)
    model = tiny(family)
    src, mask = padded_batch(4, 11)
    expected = generate(model, src, mask, max_new_tokens=9, **MODES[mode])
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        first = generate(model, src, mask, max_new_tokens=9, compile=True, **MODES[mode])
        second = generate(model, src, mask, max_new_tokens=9, compile=True, **MODES[mode])
    assert torch.equal(first, expected) and torch.equal(second, expected)
    warnings = [r for r in caplog.records if r.name == compiled.__name__]
    assert len(warnings) == 1 and "eagerly" in warnings[0].getMessage()


def test_fallback_after_a_failed_first_call(monkeypatch, caplog):
    """A compiled step that fails when first called is rerun eagerly, which the log says once."""

    def broken(fn, **kwargs):
        def run(*args):
            raise RuntimeError("inductor failed")

        return run

    monkeypatch.setattr(compiled.torch, "compile", broken)
    monkeypatch.setattr(compiled, "_warned", set())
    torch.manual_seed(0)
    model = tiny("t5")
    src, mask = padded_batch(4, 11)
    expected = generate(model, src, mask, max_new_tokens=9, num_beams=3)
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        got = generate(model, src, mask, max_new_tokens=9, num_beams=3, compile=True)
    assert torch.equal(got, expected)
    assert sum(r.name == compiled.__name__ for r in caplog.records) == 1


def test_decoder_prefix_and_sizes_share_buffers(monkeypatch):
    """A decoder prefix runs position by position; calls of one bucket reuse one set of buffers."""
    refuse_compile(monkeypatch)
    torch.manual_seed(0)
    model = tiny("t5")
    src, mask = padded_batch(3, 11)
    prefix = torch.randint(3, 97, (3, 3))
    expected = generate(model, src, mask, max_new_tokens=7, decoder_input_ids=prefix)
    got = generate(model, src, mask, max_new_tokens=7, decoder_input_ids=prefix, compile=True)
    assert torch.equal(got, expected)
    generate(model, src[:, :9], mask[:, :9], max_new_tokens=12, compile=True)  # same buckets
    assert len(model._fixed_steps) == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["greedy", "beam 4", "sampling"])
def test_compiled_generate_equals_eager(mode, caplog):
    """torch.compile (inductor on the CPU): one compile per shape key, shared by greedy and sampling."""
    torch.manual_seed(0)
    model = compiled_model()
    src, mask = padded_batch(4, 11)
    options = dict(MODES[mode], max_new_tokens=10)
    if mode == "beam 4":
        src, mask = src[:1], mask[:1]  # 4 rows, as greedy's
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        got = generate(model, src, mask, compile=True, **options)
    assert torch.equal(got, generate(model, src, mask, **options))
    assert not [r for r in caplog.records if r.name == compiled.__name__]  # compiled, not fallen back
    assert all(s.runner.compiled is not None for s in model._fixed_steps.values())


_model = None


def compiled_model():
    """One T5 for the compiled tests, so its compiled steps are reused between them."""
    global _model
    if _model is None:
        torch.manual_seed(0)
        _model = tiny("t5")
    return _model


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["greedy", "beam 4", "sampling"])
def test_cuda_graph_generate_equals_eager(mode, caplog):
    """The step captured in a CUDA graph and replayed gives the eager tokens; nothing falls back."""
    torch.manual_seed(0)
    model = tiny("t5").cuda()
    src, mask = padded_batch(4, 11)
    src, mask = src.cuda(), mask.cuda()
    options = dict(MODES[mode], max_new_tokens=10)
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        got = generate(model, src, mask, compile=True, **options)
        again = generate(model, src, mask, compile=True, **options)
    expected = generate(model, src, mask, **options)
    assert torch.equal(got, expected) and torch.equal(again, expected)
    assert not [r for r in caplog.records if r.name == compiled.__name__]
    assert all(s.runner.graph is not None for s in model._fixed_steps.values())


@pytest.mark.parametrize("family", ["t5", "umt5", "rot5", "rot5-prepended", "gemma", "gemma2", "transformer-post"])
def test_the_fixed_step_is_one_graph(family):
    """Traced whole (fullgraph=True, no graph break): no host read of a device value, no Python branch on
    one, which is also what capturing it in a CUDA graph needs. The eager backend: tracing only."""
    torch._dynamo.reset()  # each family traced afresh: dynamo's recompile limit counts every test's FixedStep.run
    torch.manual_seed(0)
    model = tiny(family)
    src, mask = padded_batch(3, 11)
    with torch.inference_mode():
        fixed = eager_fixed_state(model, src, mask, 10, 2).step
        traced = torch.compile(fixed.run, backend="eager", fullgraph=True, dynamic=False)
        fixed.tokens.copy_(torch.randint(3, 97, (6, 1)))
        expected = fixed.run()
        torch.testing.assert_close(traced(), expected, atol=1e-5, rtol=0)
