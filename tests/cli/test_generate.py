"""`encdec generate` on a Hugging Face directory with its tokenizer: files, stdin, text and JSONL, --device."""

import io
import json
from pathlib import Path

import pytest
import torch
from hf_kit import word_level_t5

import encdec
from encdec.cli import main
from encdec.cli.generate_text import stream_printer

transformers = pytest.importorskip("transformers")
WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was a little girl named lily she liked to play".split()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random-weight T5 saved with a word-level tokenizer: a complete Hugging Face directory."""
    return word_level_t5(tmp_path_factory.mktemp("t5"), list(dict.fromkeys(WORDS)))  # "a" once


def test_jsonl_output_has_one_record_per_input_line_equal_to_the_library(model_dir, tmp_path, capsys):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\nlily liked to play there\n")
    assert main(["generate", str(model_dir), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "4"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["input"] for r in records] == ["once upon a time", "lily liked to play there"]
    model = encdec.load_hf(model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    encoded = tokenizer(["once upon a time", "lily liked to play there"], return_tensors="pt", padding=True)
    ids = encdec.generate(model, encoded["input_ids"], encoded["attention_mask"], max_new_tokens=4)
    expected = [text.strip() for text in tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)]
    assert [r["output"] for r in records] == expected


def test_text_from_stdin_with_beams_and_several_returns(model_dir, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("a little girl\n"))
    args = ["generate", str(model_dir), "--num-beams", "3", "--num-return-sequences", "2", "--max-new-tokens", "3"]
    assert main(args) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_an_empty_input_line_is_one_sentence(model_dir, tmp_path, capsys):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\n\nlily\n")
    assert main(["generate", str(model_dir), "-i", str(inputs)]) == 2
    assert "input line 2 is empty" in capsys.readouterr().err


def test_a_directory_without_a_model_is_one_sentence(tmp_path, capsys):
    assert main(["generate", str(tmp_path)]) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_the_streamer_writes_the_decoded_text_piece_by_piece(model_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    out = io.StringIO()
    stream = stream_printer(tokenizer, out)
    for word in ("once", "upon", "a"):
        stream(torch.tensor([tokenizer.convert_tokens_to_ids(word)]))
    assert out.getvalue() == tokenizer.decode(tokenizer.convert_tokens_to_ids(["once", "upon", "a"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"], ids=["any-gpu", "gpu-1"])  # an id "cuda" reads as the marker
def test_asking_for_a_gpu_without_one_is_one_sentence(model_dir, tmp_path, capsys, device):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\n")
    assert main(["generate", str(model_dir), "-i", str(inputs), "--device", device]) == 2
    captured = capsys.readouterr()
    sentence = f"--device {device} asks for a GPU but torch sees none; use --device cpu or auto"
    assert captured.err == f"encdec: error: {sentence}\n"  # one line, no traceback
    assert captured.out == ""


def test_an_unknown_device_is_one_sentence(model_dir, capsys):
    assert main(["generate", str(model_dir), "--device", "gpu"]) == 2
    assert capsys.readouterr().err == "encdec: error: --device must be cpu, cuda, cuda:N or auto, got 'gpu'\n"


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_device_cpu_and_auto_generate_what_the_library_does(model_dir, tmp_path, capsys, device):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\n")
    args = ["generate", str(model_dir), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "4"]
    assert main([*args, "--device", device]) == 0
    record = json.loads(capsys.readouterr().out)
    model, tokenizer = encdec.load_hf(model_dir), transformers.AutoTokenizer.from_pretrained(model_dir)
    encoded = tokenizer(["once upon a time"], return_tensors="pt", padding=True)
    ids = encdec.generate(model, encoded["input_ids"], encoded["attention_mask"], max_new_tokens=4)
    assert record["output"] == tokenizer.decode(ids[0, 1:], skip_special_tokens=True).strip()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_evaluate_refuses_a_missing_gpu_in_the_same_sentence(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path), "--device", "cuda:0"]) == 2  # refused before the run is read
    assert capsys.readouterr().err.startswith("encdec: error: --device cuda:0 asks for a GPU but torch sees none")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)], ids=["cpu", "gpu"])
def test_quantize_int8_generates_what_the_quantized_library_model_does(model_dir, tmp_path, capsys, device):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\nlily liked to play there\n")
    args = ["generate", str(model_dir), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "4"]
    assert main([*args, "--quantize", "int8", "--device", device]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    model = encdec.quantize(encdec.load_hf(model_dir).to(device), "int8")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    encoded = tokenizer(["once upon a time", "lily liked to play there"], return_tensors="pt", padding=True)
    src_ids, src_mask = encoded["input_ids"].to(device), encoded["attention_mask"].to(device)
    ids = encdec.generate(model, src_ids, src_mask, max_new_tokens=4)
    expected = [text.strip() for text in tokenizer.batch_decode(ids[:, 1:].cpu(), skip_special_tokens=True)]
    assert [r["output"] for r in records] == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU")
def test_quantize_on_a_gpu_torch_cannot_see_is_the_device_sentence(model_dir, capsys):
    assert main(["generate", str(model_dir), "--quantize", "int8", "--device", "cuda"]) == 2  # not "CPU only"
    sentence = "--device cuda asks for a GPU but torch sees none; use --device cpu or auto"
    assert capsys.readouterr().err == f"encdec: error: {sentence}\n"


def test_an_unknown_quantization_is_refused(model_dir, capsys):
    assert main(["generate", str(model_dir), "--quantize", "int4"]) == 2
    assert "argument --quantize: invalid choice: 'int4' (choose from 'int8')" in capsys.readouterr().err


def test_compile_generates_what_the_library_does(model_dir, tmp_path, capsys, monkeypatch):
    """--compile reaches generate(compile=True); with torch.compile refused the fixed-shape steps run
    eagerly, so no compile slows the test, and the outputs stay the default path's."""
    from encdec.generation import compiled

    monkeypatch.setattr(compiled.torch, "compile", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("off")))
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\nlily liked to play there\n")
    args = ["generate", str(model_dir), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "4"]
    assert main([*args, "--num-beams", "2"]) == 0
    default = capsys.readouterr().out
    assert main([*args, "--num-beams", "2", "--compile"]) == 0
    assert capsys.readouterr().out == default


def test_generate_picks_a_run_checkpoint_and_equals_the_library_on_it(tmp_path, capsys):
    """--checkpoint as evaluate takes it: best (default), latest or a step directory, each the model
    encdec.from_pretrained(run, checkpoint) gives."""
    import sys

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bad_inputs_kit import tiny

    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            tiny(
                training={**tiny()["training"], "steps": 4}, output={"save_interval": 2, "keep_last": 3, "plot": False}
            )
        )
    )
    run = tmp_path / "run"
    assert main(["train", str(config), "--out", str(run)]) == 0
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("Once upon a time\n")
    capsys.readouterr()
    outputs = {}
    for checkpoint in ("step_00000002", "latest"):
        assert main(["generate", str(run), "-i", str(inputs), "--checkpoint", checkpoint, "--max-new-tokens", "8"]) == 0
        outputs[checkpoint] = capsys.readouterr().out
        model = encdec.from_pretrained(run, checkpoint)
        tokenizer = encdec.load_tokenizer(run)
        ids = model.generate(torch.tensor([tokenizer.encode("Once upon a time")]), max_new_tokens=8)
        assert outputs[checkpoint].strip() == tokenizer.decode(ids[0].tolist()).strip()
    assert main(["generate", str(run), "-i", str(inputs), "--checkpoint", "step_99999999"]) == 2
    assert "step_99999999" in capsys.readouterr().err
