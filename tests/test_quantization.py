"""encdec.quantize(model, "int8"): every linear layer int8, logits and tokens close to fp32 with either kernel
(fbgemm's on the CPU; int_mm's, a GPU's, forced on the CPU and run on a GPU where there is one), refusals."""

import copy

import pytest
import torch
from torch import nn

import encdec
from encdec.errors import ConfigError
from encdec.models import build_model, preset
from encdec.modules.int8_linear import Int8Linear, int8_supported
from encdec.quantization import quantize_int8

pytestmark = pytest.mark.skipif(not int8_supported(), reason="this torch build has no fbgemm int8 kernels")
V = 61


def tiny(name: str, **overrides) -> nn.Module:
    torch.manual_seed(0)
    cfg = preset(name, **{"vocab_size": V, "pad_id": V - 2, "eos_id": V - 1, "decoder_start_id": 0, **overrides})
    return build_model(cfg).eval()


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("name", ["t5-tiny", "transformer-tiny", "rot5-tiny", "decoder_only-tiny", "rnn_seq2seq-tiny"])
def test_int8_logits_are_close_to_fp32(name):
    model = tiny(name)
    quantized = encdec.quantize(copy.deepcopy(model), "int8")
    src, tgt = torch.randint(0, V - 2, (3, 11)), torch.randint(0, V - 2, (3, 7))
    with torch.no_grad():
        expected, got = model(src, tgt).logits, quantized(src, tgt).logits
    assert relative_error(got, expected) < 0.05
    assert not torch.equal(got, expected)  # the int8 path ran


def test_every_linear_is_int8_the_tied_head_included_and_the_router_is_not():
    model = encdec.quantize(tiny("rot5-tiny", n_experts=2), "int8")
    plain = [name for name, m in model.named_modules() if type(m) is nn.Linear]
    assert plain and all(name.endswith("router") for name in plain)
    assert isinstance(model.lm_head, Int8Linear) and not model.training
    assert all(not p.requires_grad for p in model.parameters())


def sharp_tiny(name: str = "transformer-tiny", **overrides) -> nn.Module:
    model = tiny(name, **overrides)
    with torch.no_grad():  # sharpen the random model's distributions, as training does
        model.embed.weight.mul_(8)
    return model


def test_greedy_tokens_mostly_agree_with_fp32():
    model = sharp_tiny()
    src = torch.randint(0, V - 2, (8, 16))
    expected = encdec.generate(model, src, max_new_tokens=12, min_new_tokens=12)
    got = encdec.generate(encdec.quantize(copy.deepcopy(model), "int8"), src, max_new_tokens=12, min_new_tokens=12)
    assert (got == expected).float().mean() >= 0.9


@pytest.mark.skipif(not int8_supported("int_mm"), reason="this torch build has no torch._int_mm")
def test_the_int_mm_kernel_forced_on_the_cpu_gives_greedy_tokens_mostly_equal_to_fp32():
    model = sharp_tiny(vocab_size=64)  # a vocabulary of a multiple of 8: the tied head is int8 too
    quantized = quantize_int8(copy.deepcopy(model), kernel="int_mm")
    layers = [m for m in quantized.modules() if isinstance(m, Int8Linear)]
    assert isinstance(quantized.lm_head, Int8Linear) and {m.kernel for m in layers} == {"int_mm"}
    src = torch.randint(0, V - 2, (8, 16))
    expected = encdec.generate(model, src, max_new_tokens=12, min_new_tokens=12)
    got = encdec.generate(quantized, src, max_new_tokens=12, min_new_tokens=12)
    assert (got == expected).float().mean() >= 0.9
    with torch.no_grad():
        assert not torch.equal(quantized(src, got).logits, model(src, got).logits)  # the int8 path ran


@pytest.mark.skipif(not int8_supported("int_mm"), reason="this torch build has no torch._int_mm")
def test_the_int_mm_kernel_leaves_layers_whose_features_are_not_multiples_of_8_in_floating_point(caplog):
    model = tiny("transformer-tiny")  # vocabulary 61: the tied head stays the embeddings' product
    with caplog.at_level("INFO", logger="encdec.quantization"):
        quantize_int8(model, kernel="int_mm")
    assert model.lm_head is None
    assert all(type(m) is not nn.Linear for m in model.modules())  # every other layer is a multiple of 8
    assert "left in floating point" in caplog.text and ", 1 left in floating point" in caplog.text


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_model_on_a_gpu_quantizes_and_generates_tokens_mostly_equal_to_unquantized(dtype):
    model = sharp_tiny(vocab_size=64).to("cuda", dtype)
    quantized = encdec.quantize(copy.deepcopy(model), "int8")
    assert {m.kernel for m in quantized.modules() if isinstance(m, Int8Linear)} == {"int_mm"}
    assert quantized.lm_head.weight_int8.device.type == "cuda"
    src = torch.randint(0, V - 2, (8, 16), device="cuda")
    expected = encdec.generate(model, src, max_new_tokens=12, min_new_tokens=12)
    got = encdec.generate(quantized, src, max_new_tokens=12, min_new_tokens=12)
    assert (got == expected).float().mean() >= 0.85
    with torch.no_grad():
        assert quantized(src, got).logits.dtype == dtype


def test_an_int8_encoder_over_a_long_input_attends_whole_and_fits_as_fp32_s_does():
    """A long input's layers attend whole in SDPA's fused kernel, the same choice and the same fit check int8 or not:
    an int8 attention holds no parameters, and asking where it computed raised StopIteration in the fit check of
    `encdec transcribe --quantize int8` over 8 windows of 30 s (benchmarks/bench_transcribe.py, 13 minutes)."""
    model = tiny("transformer-tiny")
    quantized = quantize_int8(copy.deepcopy(model))
    assert not any(True for _ in quantized.encoder.blocks[0].self_attn.parameters())
    for m in (model, quantized):
        m.encoder.long_scores = 0  # every layer past the threshold of chunks
    with torch.no_grad():
        assert [quantized.encoder.fused(i, packed=False) for i in range(len(quantized.encoder.blocks))] == [True] * len(
            quantized.encoder.blocks
        )
        assert quantized.encoder.score_numbers(8, 1500) == model.encoder.score_numbers(8, 1500) == 0
        src = torch.randint(3, V - 2, (2, 40))
        ids = encdec.generate(quantized, src, torch.ones_like(src, dtype=torch.bool), max_new_tokens=4)
    assert ids.shape == (2, 5)


def test_the_int8_weights_take_a_quarter_of_the_fp32_bytes():
    model = tiny("t5-tiny")
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    fp32_bytes = sum(m.weight.numel() * 4 for m in linears)
    encdec.quantize(model, "int8")
    int8_bytes = sum(
        m.int8_weight().int_repr().numel()
        for m in model.modules()
        if isinstance(m, Int8Linear)
        if m is not model.lm_head
    )
    assert int8_bytes * 4 == fp32_bytes


def test_from_pretrained_quantizes(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(
        vocab_size=V, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4, decoder_start_token_id=0
    )
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path)
    model = encdec.from_pretrained(tmp_path, quantize="int8")
    assert isinstance(model.encoder.blocks[0].ffn.wi, Int8Linear)


@pytest.mark.parametrize(
    "prepare, sentence",
    [
        (lambda m: m.to(torch.bfloat16), "on the CPU quantizes fp32 weights, and this model holds bfloat16: load it"),
        (lambda m: m.to("meta"), "int8 decoding runs on the CPU or a CUDA GPU, and the model is on meta: move it"),
        (lambda m: encdec.quantize(m, "int8"), "this model is already quantized to int8"),
    ],
)
def test_what_int8_cannot_run_is_refused_in_one_sentence(prepare, sentence):
    with pytest.raises(ConfigError, match=sentence):
        encdec.quantize(prepare(tiny("t5-tiny")), "int8")


def test_the_int_mm_kernel_takes_bf16_but_not_float64():
    quantized = quantize_int8(tiny("t5-tiny", vocab_size=64).to(torch.bfloat16), kernel="int_mm")
    src = torch.randint(0, V - 2, (2, 5))
    with torch.no_grad():
        assert quantized(src, src).logits.dtype == torch.bfloat16
    with pytest.raises(
        ConfigError, match="the int_mm kernel quantizes fp32, bf16 or fp16 weights, and this model holds float64"
    ):
        quantize_int8(tiny("t5-tiny").double(), kernel="int_mm")


def test_an_unknown_scheme_is_refused():
    with pytest.raises(ConfigError, match="quantize must be one of int8, got 'int4'"):
        encdec.quantize(tiny("t5-tiny"), "int4")


def test_a_quantized_t5_runs_under_fp16_autocast_with_its_output_projection_in_fp32():
    model = tiny("t5-tiny")
    quantized = encdec.quantize(copy.deepcopy(model), "int8")  # no .weight on wo: the fp32 branch calls the layer
    src = torch.randint(0, V - 2, (2, 7))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        got, expected = quantized(src, src).logits.float(), model(src, src).logits.float()
    assert relative_error(got, expected) < 0.05
