"""`encdec generate MODEL --draft DRAFT`: speculative decoding writes plain greedy's outputs and says its acceptance."""

import json

import pytest
from hf_kit import word_level_t5

from encdec.cli import main

pytest.importorskip("transformers")
WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was little girl named lily she liked to play".split()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """A target of two layers a stack and a draft of one, of one word-level tokenizer."""
    root = tmp_path_factory.mktemp("draft")
    return word_level_t5(root / "target", WORDS, num_layers=2), word_level_t5(root / "draft", WORDS, num_layers=1)


def outputs(capsys, args: list[str]) -> tuple[list[str], str]:
    assert main(args) == 0
    captured = capsys.readouterr()
    return [json.loads(line)["output"] for line in captured.out.splitlines()], captured.err


@pytest.mark.parametrize(
    "shares",
    [[], ["--draft-shares-encoder"], ["--draft-shares-encoder", "--draft-quantize", "int8"]],
    ids=["own-encoder", "shared-encoder", "int8-draft"],
)
def test_a_draft_generates_the_model_s_greedy_outputs_and_reports_its_acceptance(dirs, tmp_path, capsys, shares):
    target, draft = dirs
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("once upon a time\nlily liked to play there\nshe was a little girl\n")
    args = ["generate", str(target), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "9"]
    plain, _ = outputs(capsys, args)
    speculative, err = outputs(capsys, [*args, "--draft", str(draft), "--num-assistant-tokens", "3", *shares])
    assert speculative == plain
    assert "tokens per target step" in err and "draft tokens accepted" in err


def test_a_draft_of_another_tokenizer_is_one_sentence(dirs, tmp_path, capsys):
    other = word_level_t5(tmp_path / "other", [*WORDS[:-1], "dance"])
    capsys.readouterr()  # what saving it wrote
    assert main(["generate", str(dirs[0]), "--draft", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("encdec: error: --draft") and "another tokenizer" in err and err.count("\n") == 1


def test_draft_options_without_a_draft_are_one_sentence(dirs, capsys):
    for flag in (["--num-assistant-tokens", "3"], ["--draft-quantize", "int8"], ["--draft-shares-encoder"]):
        assert main(["generate", str(dirs[0]), *flag]) == 2
        assert f"{flag[0]} acts only with a draft model" in capsys.readouterr().err
    assert main(["generate", str(dirs[0]), "--draft", str(dirs[1]), "--num-assistant-tokens", "0"]) == 2
    assert "--num-assistant-tokens" in capsys.readouterr().err
