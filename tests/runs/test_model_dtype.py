"""A model opens in the dtype its weights were stored in unless another is asked (transformers' dtype="auto"):
a bf16 or fp16 Hugging Face checkpoint stays so and computes what transformers computes in it, an encdec run
(float32) stays float32, and a dtype that is none is one sentence."""

import json

import pytest
import torch
from run_kit import tiny_pairs_run
from transformers import T5Config, T5ForConditionalGeneration

import encdec
from encdec.errors import ConfigError
from encdec.runs.model_dtype import stored_dtype

# bf16 keeps 8 bits of mantissa: logits of a few units agree to a few hundredths (measured: 0.018 on 3.6)
TOLERANCE = {torch.bfloat16: 0.06, torch.float16: 0.01}


def hf_t5(path, dtype: torch.dtype, drop_dtype_key: bool = False):
    torch.manual_seed(0)
    config = T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(config).eval().to(dtype)
    model.save_pretrained(path)
    if drop_dtype_key:  # a config.json written before transformers recorded the dtype
        values = json.loads((path / "config.json").read_text())
        values.pop("dtype", None), values.pop("torch_dtype", None)
        (path / "config.json").write_text(json.dumps(values))
    return model


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_checkpoint_opens_as_stored_and_computes_as_transformers(tmp_path, dtype):
    hf = hf_t5(tmp_path, dtype)
    model = encdec.from_pretrained(tmp_path)
    assert {p.dtype for p in model.parameters()} == {dtype}
    ids = torch.tensor([[5, 6, 7, 1], [8, 9, 1, 0]])
    mask, tgt = ids.ne(0), torch.tensor([[0, 3, 4], [0, 5, 6]])
    ours = model(ids, tgt, src_mask=mask).logits.float()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits.float()
    assert (ours - theirs).abs().max() < TOLERANCE[dtype]
    reference = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=False, num_beams=1)
    assert torch.equal(model.generate(ids, mask, max_new_tokens=5), reference)


def test_a_dtype_asked_is_the_dtype_given(tmp_path):
    hf_t5(tmp_path, torch.bfloat16)
    for asked, dtype in [("float32", torch.float32), ("fp16", torch.float16), (torch.float32, torch.float32)]:
        assert {p.dtype for p in encdec.from_pretrained(tmp_path, dtype=asked).parameters()} == {dtype}


def test_without_a_dtype_in_config_json_the_weights_say_it(tmp_path):
    hf_t5(tmp_path, torch.bfloat16, drop_dtype_key=True)
    assert stored_dtype(tmp_path) == torch.bfloat16
    assert next(encdec.from_pretrained(tmp_path).parameters()).dtype == torch.bfloat16


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A seq2seq run of 2 steps, byte tokenizer, on the CPU."""
    return tiny_pairs_run(tmp_path_factory.mktemp("dtype"))


def test_a_run_opens_in_float32_as_trained_or_in_the_dtype_asked(tiny_run):
    assert {p.dtype for p in encdec.from_pretrained(tiny_run).parameters()} == {torch.float32}
    assert {p.dtype for p in encdec.from_pretrained(tiny_run, dtype="bf16").parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("bad", ["float64", "int8", "", "x" * 5000, 3])
def test_a_dtype_that_is_none_is_one_sentence(tmp_path, bad):
    with pytest.raises(ConfigError, match="dtype must be one of auto, float32, bfloat16, float16"):
        encdec.from_pretrained(tmp_path, dtype=bad)


def test_the_commands_that_open_a_model_take_its_dtype(tiny_run, tmp_path, capsys):
    """`encdec generate RUN --dtype bf16` generates what the library's bf16 model generates; a dtype that is none
    is one sentence on every command that opens a model."""
    from encdec.cli import main

    (tmp_path / "in.txt").write_text("red cat\nblue dog\n")
    argv = ["generate", str(tiny_run), "--input", str(tmp_path / "in.txt"), "--max-new-tokens", "6"]
    assert main([*argv, "--dtype", "bf16"]) == 0
    said = capsys.readouterr().out.splitlines()
    opened = encdec.runs.open_model(tiny_run, dtype="bf16")
    batch = opened.text(["red cat", "blue dog"], padding=True, return_tensors="pt")
    ids = opened.model.generate(batch["input_ids"], batch["attention_mask"].bool(), max_new_tokens=6)
    assert said == opened.text.batch_decode(ids, skip_special_tokens=True)
    for command in ("generate", "evaluate", "attention", "serve"):
        assert main([command, str(tiny_run), "--dtype", "float64"]) == 2
        assert "argument --dtype: invalid choice: 'float64'" in capsys.readouterr().err


@pytest.fixture(params=[("a Xeon with AMX", True), ("an AMD EPYC with AVX-512 BF16 alone", False)], ids=lambda p: p[0])
def native_bf16(request, monkeypatch):
    """This CPU as one that multiplies bf16 natively, by AMX or by AVX-512 BF16 alone (the suite runs without
    either: conftest limits oneDNN's ISA)."""
    from encdec.cpu_features import CpuFeatures

    model, amx = request.param
    features = CpuFeatures(model, amx=amx, avx512_bf16=True, vnni=True)
    monkeypatch.setattr("encdec.runs.model_dtype.cpu_features", lambda: features)


def test_a_float32_model_decodes_in_bf16_on_a_cpu_that_multiplies_it_natively(tiny_run, tmp_path, capsys, native_bf16):
    """`encdec generate` under --dtype auto on such a CPU opens a float32 run in bf16, says so, and generates what
    the library's bf16 model generates; --dtype float32, --quantize int8 (float32 weights) or a GPU keep float32."""
    from encdec.cli import main
    from encdec.runs.model_dtype import native_dtype

    (tmp_path / "in.txt").write_text("red cat\nblue dog\n")
    argv = ["generate", str(tiny_run), "--input", str(tmp_path / "in.txt"), "--max-new-tokens", "6"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "decoding in bfloat16, which this CPU multiplies natively (--dtype float32 keeps its float32)" in err
    opened = encdec.runs.open_model(tiny_run, dtype="bf16")
    batch = opened.text(["red cat", "blue dog"], padding=True, return_tensors="pt")
    ids = opened.model.generate(batch["input_ids"], batch["attention_mask"].bool(), max_new_tokens=6)
    assert out.splitlines() == opened.text.batch_decode(ids, skip_special_tokens=True)
    assert main([*argv, "--dtype", "float32"]) == 0
    assert "decoding in" not in capsys.readouterr().err
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert native_dtype("auto", cpu, None) == torch.bfloat16
    assert native_dtype("float32", cpu, None) is native_dtype("auto", cpu, "int8") is None
    assert native_dtype("auto", gpu, None) is None
    kept = encdec.runs.open_model(tiny_run, prefer=torch.bfloat16, dtype="fp16")  # a dtype named wins
    assert next(kept.model.parameters()).dtype == torch.float16 and not kept.preferred


def test_a_half_precision_checkpoint_keeps_its_dtype_where_bf16_is_preferred(tmp_path):
    hf_t5(tmp_path, torch.float16)
    opened = encdec.runs.open_model(tmp_path, prefer=torch.bfloat16)
    assert next(opened.model.parameters()).dtype == torch.float16 and not opened.preferred
