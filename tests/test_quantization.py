"""encdec.quantize(model, "int8"): every linear layer int8, logits and tokens close to fp32, refusals."""

import copy

import pytest
import torch
from torch import nn

import encdec
from encdec.errors import ConfigError
from encdec.models import build_model, preset
from encdec.modules.int8_linear import Int8Linear, int8_supported

pytestmark = pytest.mark.skipif(not int8_supported(), reason="this torch build has no fbgemm int8 kernels")
V = 61


def tiny(name: str, **overrides) -> nn.Module:
    torch.manual_seed(0)
    cfg = preset(name, vocab_size=V, pad_id=V - 2, eos_id=V - 1, decoder_start_id=0, **overrides)
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


def test_greedy_tokens_mostly_agree_with_fp32():
    model = tiny("transformer-tiny")
    with torch.no_grad():  # sharpen the random model's distributions, as training does
        model.embed.weight.mul_(8)
    src = torch.randint(0, V - 2, (8, 16))
    expected = encdec.generate(model, src, max_new_tokens=12, min_new_tokens=12)
    got = encdec.generate(encdec.quantize(copy.deepcopy(model), "int8"), src, max_new_tokens=12, min_new_tokens=12)
    assert (got == expected).float().mean() >= 0.9


def test_the_int8_weights_take_a_quarter_of_the_fp32_bytes():
    model = tiny("t5-tiny")
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    fp32_bytes = sum(m.weight.numel() * 4 for m in linears)
    encdec.quantize(model, "int8")
    int8_bytes = sum(m.int8_weight().int_repr().numel() for m in model.modules() if isinstance(m, Int8Linear)
                     if m is not model.lm_head)  # fmt: skip
    assert int8_bytes * 4 == fp32_bytes


def test_from_pretrained_quantizes(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(vocab_size=V, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4,
                                   decoder_start_token_id=0)  # fmt: skip
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path)
    model = encdec.from_pretrained(tmp_path, quantize="int8")
    assert isinstance(model.encoder.blocks[0].ffn.wi, Int8Linear)


@pytest.mark.parametrize(
    "prepare, sentence",
    [
        (lambda m: m.to(torch.bfloat16), "quantizes fp32 weights, and this model holds bfloat16: load it in fp32"),
        (lambda m: m.to("meta"), "int8 decoding runs on the CPU only"),
        (lambda m: encdec.quantize(m, "int8"), "this model is already quantized to int8"),
    ],
)
def test_what_int8_cannot_run_is_refused_in_one_sentence(prepare, sentence):
    with pytest.raises(ConfigError, match=sentence):
        encdec.quantize(prepare(tiny("t5-tiny")), "int8")


def test_an_unknown_scheme_is_refused():
    with pytest.raises(ConfigError, match="quantize must be one of int8, got 'int4'"):
        encdec.quantize(tiny("t5-tiny"), "int4")
