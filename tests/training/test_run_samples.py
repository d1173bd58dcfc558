"""A language model's generated samples are windows of its validation text: a file that is one running text
(no document separators, as the TinyStories validation head) gives the samples asked for, not one."""

import json
import subprocess
import sys

import yaml

from encdec.evaluation.scoring import LEMMAS
from encdec.evaluation.text_metrics import rot5_lemmas


def test_evaluate_scores_the_samples_asked_for_on_a_validation_file_without_separators(tmp_path, tiny_config):
    config = yaml.safe_load(tiny_config.read_text())
    valid = tiny_config.parent / "valid.txt"
    valid.write_text(
        "Tom had a red ball. He liked to throw it high.\n\nOne day the ball fell in the pond. " * 6
    )  # running text: no <|endoftext|> anywhere, so the tinystories reader sees one document
    config["data"]["validation"] = [str(valid)]
    del config["data"]["val_fraction"]
    config["training"]["steps"] = 2
    config["evaluation"]["interval"] = 2
    tiny_config.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "encdec", "train", str(tiny_config), "--out", str(run)], check=True)
    for extra in ([], ["--data", str(valid), "--format", "text"]):
        out = tmp_path / f"eval{len(extra)}"
        command = ["evaluate", str(run), "--samples", "4", "--max-new-tokens", "3", "--out", str(out), *extra]
        command += ["--rot5-preprocessing"]
        subprocess.run([sys.executable, "-m", "encdec", *command], check=True, capture_output=True)
        report = json.loads((out / "eval.json").read_text())
        samples = report["samples"]
        assert len(samples) == 4
        assert report["data"]["rouge_rot5_lemmas"] == rot5_lemmas()  # the report names the lemmas it scored with
        assert LEMMAS[rot5_lemmas()] in (out / "eval.md").read_text()
        assert len({s["input"] for s in samples}) > 1  # distinct windows, not one repeated
