"""Decoding's products of a few rows give F.linear's values whichever kernel takes them."""

import pytest
import torch
import torch.nn.functional as F

import encdec.modules.decoding_linear as decoding
from encdec.modules import FeedForward
from encdec.modules.decoding_linear import decoding_linear

KERNELS = [pytest.param(True, id="onednn"), pytest.param(False, id="transposed")]


@pytest.fixture(params=KERNELS)
def kernel(request, monkeypatch):
    """oneDNN on (where torch has it) or off: the two kernels decoding_linear chooses between for large weights."""
    if request.param and not decoding.ONEDNN:
        pytest.skip("this torch has no oneDNN linear")
    monkeypatch.setattr(decoding, "ONEDNN", request.param)


def test_few_rows_equal_the_linear_product(kernel):
    torch.manual_seed(0)
    weight, bias = torch.randn(1024, 256), torch.randn(1024)
    for shape in [(8, 1, 256), (4, 3, 256), (32, 256), (65, 256)]:  # decoding steps, then too many rows
        x = torch.randn(*shape)
        with torch.inference_mode():
            for b in (None, bias):
                out = decoding_linear(x, weight, b)
                assert out.shape == (*shape[:-1], 1024)
                torch.testing.assert_close(out, F.linear(x, weight, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape", [(1024, 256), (64, 32)])  # reordered for oneDNN, transposed for BLAS
def test_an_updated_weight_is_reordered_again(shape):
    torch.manual_seed(0)
    weight, x = torch.randn(*shape), torch.randn(8, shape[1])
    with torch.inference_mode():
        before = decoding_linear(x, weight)
    with torch.no_grad():
        weight.mul_(2)  # an optimizer step or load_state_dict changes the weight in place
    with torch.inference_mode():
        torch.testing.assert_close(decoding_linear(x, weight), 2 * before, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape", [(1024, 256), (64, 32)])
def test_a_weight_changed_through_data_is_seen_at_the_next_call(shape):
    """`weight.data += delta` (peft's merge) leaves the version counter where it was: the copy is remade at the
    next forward or generate call (new_pass), not within the call's own products."""
    torch.manual_seed(0)
    weight, x = torch.randn(*shape), torch.randn(8, shape[1])
    with torch.inference_mode():
        before = decoding_linear(x, weight)
    weight.data += 1.0
    decoding.new_pass()
    with torch.inference_mode():
        torch.testing.assert_close(decoding_linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-4)
    assert not torch.allclose(before, F.linear(x, weight))


def test_a_model_merged_by_peft_after_it_decoded_decodes_with_the_merged_weights():
    """A model that generated, then had a peft LoRA adapter merged in (peft writes through .data), computes and
    generates what a fresh model of the merged weights does."""
    import encdec

    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    model = encdec.build_model(encdec.preset("t5-tiny", vocab_size=100, dropout=0.0)).eval()
    src, tgt = torch.randint(3, 100, (2, 20)), torch.randint(3, 100, (2, 6))
    with torch.no_grad():
        model(src, tgt)
        model.generate(src, max_new_tokens=5)
    adapter = peft.LoraConfig(target_modules=["wo", "wi", "q", "v"], init_lora_weights=False, r=4)
    merged = peft.get_peft_model(model, adapter).merge_and_unload().eval()
    fresh = encdec.build_model(merged.config).eval()
    fresh.load_state_dict(merged.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(merged(src, tgt).logits, fresh(src, tgt).logits, rtol=1e-5, atol=1e-5)
        assert torch.equal(merged.generate(src, max_new_tokens=5), fresh.generate(src, max_new_tokens=5))


@pytest.mark.parametrize("shape", [(1024, 256), (64, 32)])
def test_weights_made_under_inference_mode_serve(shape):
    """A model built or loaded inside torch.inference_mode has inference-tensor weights, which have no
    version counter; their products still take the fast kernels, with F.linear's values."""
    torch.manual_seed(0)
    with torch.inference_mode():
        weight, x = torch.randn(*shape), torch.randn(8, shape[1])
        torch.testing.assert_close(decoding_linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(decoding_linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-4)


def test_training_keeps_gradients():
    layer = FeedForward(256, 1024)
    x = torch.randn(2, 3, 256, requires_grad=True)
    layer(x).sum().backward()
    reference = torch.autograd.grad(F.linear(F.relu(F.linear(x, layer.wi.weight)), layer.wo.weight).sum(), x)[0]
    torch.testing.assert_close(x.grad, reference)
    weight = torch.randn(100, 16, requires_grad=True)
    hidden = torch.randn(2, 3, 16, requires_grad=True)
    decoding_linear(hidden, weight).sum().backward()
    torch.testing.assert_close(weight.grad, hidden.detach().sum((0, 1)).expand(100, 16))


def test_products_without_gradients_take_onednn_but_a_steps_small_ones_blas(monkeypatch):
    """An encoder's products (many rows) take the reordered-weight kernel in inference, a step's few rows by
    a small weight BLAS on its transposed copy, both with F.linear's values; with gradients they keep F.linear."""
    if not decoding.ONEDNN:
        pytest.skip("this torch has no oneDNN linear")
    calls = []
    kernel = decoding.onednn_linear
    monkeypatch.setattr(decoding, "onednn_linear", lambda *a: calls.append(a[0].shape) or kernel(*a))
    torch.manual_seed(0)
    weight, bias, x = torch.randn(64, 32), torch.randn(64), torch.randn(4, 50, 32)
    with torch.inference_mode():
        torch.testing.assert_close(decoding_linear(x, weight, bias), F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
        few = x[:1, :8]
        for b in (None, bias):
            for activation in ("none", "relu"):
                want = F.linear(few, weight, b)
                want = F.relu(want) if activation == "relu" else want
                torch.testing.assert_close(decoding_linear(few, weight, b, activation), want, rtol=1e-5, atol=1e-5)
    assert calls == [(200, 32)]
    assert decoding.transposed(weight).is_contiguous() and torch.equal(decoding.transposed(weight), weight.T)
    decoding_linear(x, weight.requires_grad_())
    assert calls == [(200, 32)]


def test_attention_projections_take_the_inference_kernel(monkeypatch):
    from encdec.modules import Attention

    calls = []
    record = lambda x, w, b=None: calls.append(w) or F.linear(x, w, b)  # noqa: E731
    monkeypatch.setattr("encdec.modules.attention.decoding_linear", record)
    attn = Attention(32, 4).eval()
    with torch.inference_mode():
        attn(torch.randn(2, 5, 32))
    assert [id(w) for w in calls] == [id(attn.q.weight), id(attn.k.weight), id(attn.v.weight), id(attn.o.weight)]


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_an_activation_inside_the_product_equals_it_after_it(kernel, activation):
    torch.manual_seed(0)
    weight, bias = torch.randn(1024, 256), torch.randn(1024)
    after = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda out: F.gelu(out, approximate="tanh")}[activation]
    for shape in [(8, 1, 256), (2, 100, 256)]:  # a decoding step, an encoder's many rows
        x = torch.randn(*shape)
        with torch.inference_mode():
            out = decoding_linear(x, weight, bias, activation)
            torch.testing.assert_close(out, after(decoding_linear(x, weight, bias)), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(out, after(F.linear(x, weight, bias)), rtol=1e-5, atol=1e-4)


def test_cpu_autocast_keeps_its_bf16_product():
    torch.manual_seed(0)
    weight, x = torch.randn(1024, 256), torch.randn(8, 256)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, reference = decoding_linear(x, weight), F.linear(x, weight)
    assert out.dtype == reference.dtype == torch.bfloat16
    assert torch.equal(out, reference)


def test_a_bf16_models_products_equal_the_linear_product_in_bf16():
    """A bf16 weight's products without gradients take oneDNN's reordered-weight kernel at every row count (where
    oneDNN multiplies bf16), with F.linear's values to bf16's rounding, bias and ReLU included."""
    torch.manual_seed(0)
    weight, bias = torch.randn(1024, 256).bfloat16(), torch.randn(1024).bfloat16()
    for shape in [(1, 1, 256), (8, 1, 256), (32, 256), (2, 100, 256)]:
        x = torch.randn(*shape).bfloat16()
        with torch.inference_mode():
            for b in (None, bias):
                for activation in ("none", "relu", "gelu"):
                    want = F.linear(x.float(), weight.float(), None if b is None else b.float())
                    want = {"none": want, "relu": F.relu(want), "gelu": F.gelu(want)}[activation]
                    out = decoding_linear(x, weight, b, activation)
                    assert out.dtype == torch.bfloat16 and out.shape == (*shape[:-1], 1024)
                    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=0.2)


def test_a_bf16_weight_takes_onednn_where_it_multiplies_bf16(monkeypatch):
    if not decoding.ONEDNN_BF16:
        pytest.skip("oneDNN does not multiply bf16 on this CPU")
    calls = []
    kernel = decoding.onednn_linear
    monkeypatch.setattr(decoding, "onednn_linear", lambda *a: calls.append(a[0].shape) or kernel(*a))
    weight, x = torch.randn(64, 32).bfloat16(), torch.randn(3, 32).bfloat16()
    with torch.inference_mode():
        decoding_linear(x, weight)
    assert calls == [(3, 32)]
    decoding_linear(x, weight.requires_grad_())  # training keeps F.linear
    assert calls == [(3, 32)]
