import pytest
import torch

from encdec.modules import Dropout, dropout


def test_dropout_drops_fraction_p_and_scales_the_rest():
    x = torch.ones(1_000_000)
    y = dropout(x, 0.1)
    assert (y == 0).float().mean().item() == pytest.approx(0.1, abs=2e-3)
    values = torch.unique(y).tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(1 / 0.9)


def test_dropout_keeps_the_expectation_and_passes_gradient_through_kept_elements():
    x = torch.randn(4, 1000, requires_grad=True)
    y = dropout(x, 0.3)
    y.sum().backward()
    kept = y != 0
    torch.testing.assert_close(x.grad[kept], torch.full_like(x.grad[kept], 1 / 0.7))
    assert (x.grad[~kept] == 0).all()


def test_dropout_is_reproducible_from_torch_seed_and_off_in_eval():
    layer = Dropout(0.5)
    x = torch.randn(3, 17)
    torch.manual_seed(5)
    a = layer(x)
    torch.manual_seed(5)
    assert torch.equal(a, layer(x))
    assert torch.equal(layer.eval()(x), x)
