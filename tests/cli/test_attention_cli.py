"""`encdec attention MODEL --source ... -o maps.png`: a PNG of the expected size with something drawn, the
numbers beside it, and bad input refused in one sentence with a non-zero exit, before anything is written."""

import math
from pathlib import Path

import numpy as np
import pytest
from hf_kit import word_level_t5
from PIL import Image

from encdec.cli import main
from encdec.inspection.plot import DPI, panel_inches

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_2ba69c1" / "run"  # a byte-level T5: 2 + 2 layers
transformers = pytest.importorskip("transformers")
WORDS = ["<pad>", "</s>", "<unk>"] + "a dog runs on the beach ein hund rennt am strand".split()

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A random-weight T5 with a word-level tokenizer: a complete Hugging Face directory."""
    return word_level_t5(tmp_path_factory.mktemp("t5"), WORDS, num_layers=3)


def expected_size(panels: int, queries: int, keys: int) -> tuple[int, int]:
    """The pixels plot_attention draws `panels` panels of queries x keys tokens into (four panels a row)."""
    cols, rows = min(panels, 4), math.ceil(panels / 4)
    width, height = cols * (panel_inches(keys) + 1.2), rows * (panel_inches(queries) + 1.0)
    return round(width * DPI), round(height * DPI)


def check_png(path: Path, size: tuple[int, int]) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == size
        pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # colour maps, labels: not a blank page


def test_every_layer_heads_averaged_and_the_numbers(tmp_path, capsys):
    out, npz = tmp_path / "maps.png", tmp_path / "maps.npz"
    args = ["attention", str(RUN), "--source", "A dog runs.", "--target", "Ein Hund.", "-o", str(out)]
    assert main([*args, "--npz", str(npz)]) == 0
    assert "wrote" in capsys.readouterr().out
    with np.load(npz) as saved:
        cross, sources = saved["cross"], saved["source_tokens"]
    assert cross.shape[:3] == (2, 2, 10) and cross.shape[3] == len(sources)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-6)
    check_png(out, expected_size(2, 10, len(sources)))


def test_a_grid_of_one_layers_heads_on_a_hugging_face_directory(hf_dir, tmp_path):
    out, npz = tmp_path / "heads.png", tmp_path / "heads.npz"
    args = ["attention", str(hf_dir), "--source", "a dog runs on the beach", "-o", str(out), "--npz", str(npz)]
    assert main([*args, "--heads", "grid", "--layer", "1", "--max-new-tokens", "5"]) == 0
    with np.load(npz) as saved:
        assert bool(saved["generated"])
        assert saved["source_tokens"].tolist() == ["a", "dog", "runs", "on", "the", "beach"]  # as generate reads it
        target = len(saved["target_tokens"])
    assert 1 <= target <= 5
    check_png(out, expected_size(4, target, 6))


def test_encoder_self_attention(tmp_path):
    out = tmp_path / "encoder.png"
    assert main(["attention", str(RUN), "--source", "Hi.", "-o", str(out), "--encoder", "--layer", "0"]) == 0
    source = len("translate English to German: Hi.")
    check_png(out, expected_size(1, source, source))


def refused(args: list[str], capsys) -> str:
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and err.startswith("encdec: error: ")
    return err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--source", "  "], "--source is empty"),
        (["--source", "A dog.", "--target", ""], "--target is empty"),
        (["--source", "A dog.", "--layer", "2"], "--layer 2 does not exist: the decoder has 2 layers, 0 to 1"),
        (["--source", "A dog.", "--layer", "-1"], "--layer"),
        (["--source", "A dog.", "--heads", "max"], "--heads"),
    ],
)
def test_bad_input_is_one_sentence_and_writes_nothing(tmp_path, capsys, extra, says):
    out = tmp_path / "maps.png"
    assert says in refused(["attention", str(RUN), "-o", str(out), *extra], capsys)
    assert not out.exists()


def test_a_missing_model_is_one_sentence(tmp_path, capsys):
    err = refused(["attention", str(tmp_path / "nothing"), "--source", "A dog.", "-o", str(tmp_path / "m.png")], capsys)
    assert "nothing" in err


def test_outputs_are_refused_where_they_do_not_belong(tmp_path, capsys, hf_dir):
    link = tmp_path / "link.png"
    link.symlink_to(tmp_path / "elsewhere.png")
    inside_checkpoints = RUN / "checkpoints" / "maps.png"
    for out, says in [
        (tmp_path / "maps.jpg", "must name a .png file"),
        (tmp_path / "no" / "maps.png", "does not exist"),
        (link, "is a symlink"),
        (inside_checkpoints, "lies inside the checkpoints of the run"),
    ]:
        assert says in refused(["attention", str(RUN), "--source", "A dog.", "-o", str(out)], capsys)
    assert not (tmp_path / "elsewhere.png").exists() and not inside_checkpoints.exists()
    into_model = hf_dir / "maps.png"
    err = refused(["attention", str(hf_dir), "--source", "a dog", "-o", str(into_model)], capsys)
    assert "lies inside the model directory" in err and not into_model.exists()
