"""`encdec serve MODEL --draft DRAFT`: the draft options are `encdec generate`'s, refused as there in one sentence
(another tokenizer, a path that is not there, a draft option without a draft); a good draft starts the server."""

import pytest
from hf_kit import word_level_t5

from encdec.cli import main

pytest.importorskip("transformers")
pytest.importorskip("uvicorn")
WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was little girl named lily she liked to play".split()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("served-draft")
    return word_level_t5(root / "target", WORDS, num_layers=2), word_level_t5(root / "draft", WORDS, num_layers=1)


def serve(*args: str) -> int:
    return main(["serve", *args, "--port", "0", "--device", "cpu"])


def one_sentence(capsys, *args: str) -> str:
    """The refusal: the last line on stderr, the only error (the lines before: the model it opened)."""
    assert serve(*args) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("encdec: error: ") and sum("error" in line for line in lines) == 1, lines
    return lines[-1]


def test_a_draft_of_another_tokenizer_is_one_sentence(dirs, tmp_path, capsys):
    other = word_level_t5(tmp_path / "other", [*WORDS[:-1], "dance"])
    capsys.readouterr()
    assert "another tokenizer" in one_sentence(capsys, str(dirs[0]), "--draft", str(other))


def test_a_draft_path_that_is_not_there_is_one_sentence(dirs, tmp_path, capsys):
    said = one_sentence(capsys, str(dirs[0]), "--draft", str(tmp_path / "missing"))
    assert said.startswith(f"encdec: error: --draft {tmp_path / 'missing'} is neither")


def test_draft_options_without_a_draft_are_one_sentence(dirs, capsys):
    for flag in (["--num-assistant-tokens", "3"], ["--draft-quantize", "int8"], ["--draft-shares-encoder"]):
        assert f"{flag[0]} acts only with a draft model" in one_sentence(capsys, str(dirs[0]), *flag)
    assert "--num-assistant-tokens" in one_sentence(
        capsys, str(dirs[0]), "--draft", str(dirs[1]), "--num-assistant-tokens", "0"
    )


def test_a_good_draft_starts_the_server(dirs, monkeypatch):
    import uvicorn

    async def no_loop(self) -> None:  # started and stopped at once, as a Ctrl-C would
        return None

    monkeypatch.setattr(uvicorn.Server, "main_loop", no_loop)
    assert serve(str(dirs[0]), "--draft", str(dirs[1]), "--num-assistant-tokens", "2", "--draft-quantize", "int8") == 0
