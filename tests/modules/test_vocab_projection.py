"""The vocabulary projection gives the same logits whichever way the product is taken."""

import torch

from encdec.modules import vocab_logits


def test_decoding_rows_equal_the_linear_product():
    torch.manual_seed(0)
    weight = torch.randn(1000, 32)
    for shape in [(8, 1, 32), (4, 3, 32), (65, 32)]:  # few rows (transposed product) and many (linear)
        hidden = torch.randn(*shape)
        with torch.inference_mode():
            logits = vocab_logits(hidden, weight)
        assert logits.shape == (*shape[:-1], 1000)
        torch.testing.assert_close(logits, hidden @ weight.T, rtol=1e-5, atol=1e-5)


def test_training_keeps_gradients():
    weight = torch.randn(100, 16, requires_grad=True)
    hidden = torch.randn(2, 3, 16, requires_grad=True)
    vocab_logits(hidden, weight).sum().backward()
    torch.testing.assert_close(weight.grad, hidden.detach().sum((0, 1)).expand(100, 16))
